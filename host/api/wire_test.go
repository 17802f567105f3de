package api

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wasm"
)

// The API's JSON types moved from host/api (where several answers were
// the builtins' own structs, encoded as they are) to package wire, with
// conversions in this package. This test keeps the answers exactly as
// they were: for every answer that used to be a builtin type, a value
// with every field set is encoded the old way (the builtin struct, or
// the old host/api wrapper around it, re-declared here as it was) and
// the new way (the conversion to wire), and the two JSON documents must
// be equal, field by field — after the two deliberate wire changes
// (wireChanges): time ticks became strings and a topic's retention max_age
// a Go duration string, so that no integer in an answer passes 2^53.
func TestWireJSONUnchanged(t *testing.T) {
	fill := func(v any) any { fillAll(reflect.ValueOf(v).Elem()); return v }

	res := fill(&broadcast.Result{}).(*broadcast.Result)
	task := fill(&broadcast.TaskInfo{}).(*broadcast.TaskInfo)
	ti := fill(&mapping.TopicInfo{}).(*mapping.TopicInfo)
	tr := fill(&mapping.Translation{}).(*mapping.Translation)
	topic := fill(&mapping.Topic{}).(*mapping.Topic)
	groups := *fill(&[]mapping.GroupOffset{}).(*[]mapping.GroupOffset)
	pos := *fill(&[]wal.Position{}).(*[]wal.Position)
	msg := fill(&wal.Message{}).(*wal.Message)
	audit := *fill(&[]locks.AuditRecord{}).(*[]locks.AuditRecord)
	pe := fill(&locks.PresenceEntry{}).(*locks.PresenceEntry)
	plugins := *fill(&[]wasm.Info{}).(*[]wasm.Info)
	change := &TopicChange{Kind: "create", Topic: "t", DryRun: true, NoChange: true, Epoch: 3, Moved: []int{1}, BroadcastID: 9, Info: ti}

	// The old encodings, as host/api declared them before the move.
	type oldResourceKey struct {
		Domain string `json:"domain"`
		Key    string `json:"key"`
		Mode   string `json:"mode,omitempty"`
	}
	type oldResult struct {
		broadcast.Result
		TimedOut bool `json:"timed_out,omitempty"`
	}
	type oldTask struct {
		broadcast.TaskInfo
		ResourceKeys []oldResourceKey `json:"resource_keys"`
	}
	oldT := oldTask{TaskInfo: *task}
	for _, k := range task.ResourceKeys {
		oldT.ResourceKeys = append(oldT.ResourceKeys, oldResourceKey{k.Domain, k.Key, k.Mode.String()})
	}
	type oldTopicChange struct {
		Kind        string             `json:"kind"`
		Topic       string             `json:"topic"`
		DryRun      bool               `json:"dry_run,omitempty"`
		NoChange    bool               `json:"no_change"`
		Epoch       uint64             `json:"epoch"`
		Moved       []int              `json:"moved,omitempty"`
		BroadcastID uint64             `json:"broadcast_id,omitempty"`
		Info        *mapping.TopicInfo `json:"info,omitempty"`
	}
	type oldMessage struct {
		Offset      uint64            `json:"offset"`
		Queue       string            `json:"physical_queue"`
		QueueOffset uint64            `json:"physical_offset"`
		TimeTick    uint64            `json:"time_tick"`
		Time        time.Time         `json:"time"`
		Payload     []byte            `json:"payload"`
		Properties  map[string]string `json:"properties,omitempty"`
		// Added on purpose with record kinds (issue 11): the record's
		// kind, and the marker's name for kind marker.
		Kind   string `json:"kind"`
		Marker string `json:"marker,omitempty"`
	}
	type oldAnnounce struct {
		locks.PresenceEntry
		Token string `json:"token"`
	}
	msgTime := time.Unix(0, int64(msg.Tick)).UTC()

	cases := []struct {
		name     string
		old, new any
	}{
		{"broadcast result", oldResult{*res, true}, resultJSON(res, true)},
		{"broadcast task", oldT, taskJSON(task)},
		{"topic change", oldTopicChange{change.Kind, change.Topic, change.DryRun, change.NoChange, change.Epoch, change.Moved, change.BroadcastID, ti}, topicChangeJSON(change)},
		{"topic info", ti, topicInfoJSON(ti)},
		{"topic", topic, topicJSON(topic)},
		{"translation", tr, translationJSON(tr)},
		{"group offsets", groups, groupOffsetsJSON(groups)},
		{"append positions", pos, positionsJSON(pos)},
		{"channel message", oldMessage{msg.Offset, msg.Queue, msg.QueueOffset, msg.Tick, msgTime, msg.Payload, msg.Props, msg.Kind.String(), ""}, messageJSON(msg)},
		{"lock audit", audit, auditJSON(audit)},
		{"announce answer", oldAnnounce{*pe, "tok"}, presenceJSON(pe, "tok")},
		{"presence entry", pe, presenceJSON(pe, "")},
		{"plugins", plugins, pluginsJSON(plugins)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, n := wireChanges(decodeAny(t, c.old), ""), decodeAny(t, c.new)
			if d := cmp.Diff(o, n); d != "" {
				t.Errorf("JSON changed (-old +new):\n%s", d)
			}
		})
	}
}

// wireChanges applies the deliberate changes to an old JSON document:
// time_tick, first_tick and last_tick numbers become decimal strings, a
// retention's max_age (nanoseconds) a Go duration string.
func wireChanges(v any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = wireChanges(e, k)
		}
	case []any:
		for i, e := range v {
			v[i] = wireChanges(e, key)
		}
	case float64:
		switch key {
		case "time_tick", "first_tick", "last_tick":
			return strconv.FormatUint(uint64(v), 10)
		case "max_age":
			return time.Duration(v).String()
		}
	}
	return v
}

func decodeAny(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

// fillAll sets every exported field reachable from v to a non-zero value
// (one element per slice and map), so that omitempty hides nothing.
func fillAll(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(v.Elem())
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fillAll(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(k)
		fillAll(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i))
			}
		}
	}
}
