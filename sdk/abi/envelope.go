package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// The envelope is the one binary encoding of everything that crosses the
// host/guest boundary. It is language-neutral and versioned:
//
//	envelope = u8 version (=1) · u8 record type · record body
//	u8/u32/u64  little-endian unsigned integers
//	str/bytes   u32 length · that many bytes
//	list of X   u32 count · count × X
//
// A decoder rejects an unknown version, an unknown record type, a length
// or count running past the end, and trailing bytes. It never panics and
// never allocates more than the input can describe.
// docs/plugin-abi.md lists every record body field by field.

// EnvelopeVersion is the version byte of every envelope.
const EnvelopeVersion = 1

// RecordType is the second byte of an envelope.
type RecordType uint8

// Record types.
const (
	RecMessage      RecordType = 1
	RecPolicyInput  RecordType = 2
	RecPolicyOutput RecordType = 3
	RecResourceKeys RecordType = 4
	RecKVList       RecordType = 5
	RecAttrs        RecordType = 6
)

// ErrMalformed is wrapped by every decode error.
var ErrMalformed = errors.New("abi: malformed envelope")

// Message is a broadcast message as handed to ack callbacks, validators and
// resource-key functions.
type Message struct {
	// ID is the broadcast ID (0 where none exists yet: validators and
	// resource-key functions run before the task is persisted).
	ID uint64
	// Type is the message type the handler was registered for.
	Type string
	// Payload is the message body as the client sent it.
	Payload []byte
	// Properties are the message's string properties.
	Properties map[string]string
	// VChannels are the target vchannels with their append results (set for
	// ack callbacks; names only before the append).
	VChannels []VChannel
	// Attempt is the 1-based callback attempt (0 outside ack callbacks).
	Attempt uint32
	// TraceParent is the W3C traceparent of the broadcast ("" if none).
	TraceParent string
}

// VChannel is one target vchannel and, once appended, where it went.
type VChannel struct {
	Name          string
	Appended      bool
	LogicOffset   uint64
	PhysicalQueue string
	TimeTick      uint64
}

// PolicyInput is what a mapping policy gets.
type PolicyInput struct {
	// Operation is "create", "grow" or "remap".
	Operation string
	Topic     string
	// Queues is the total number of logic queues after the operation.
	Queues uint32
	// Current is the existing assignment (empty for create).
	Current []Assignment
	// Brokers are the candidate brokers.
	Brokers []Broker
}

// Broker is a candidate broker for a mapping policy.
type Broker struct {
	Name string
	// Load is the number of logic queues currently on the broker.
	Load   uint32
	Labels map[string]string
}

// Assignment places one logic queue on a broker.
type Assignment struct {
	Queue  uint32
	Broker string
}

// PolicyOutput is what a mapping policy returns.
type PolicyOutput struct {
	Assignments []Assignment
}

// KVPair is one entry of a kv_scan result.
type KVPair struct {
	Key   []byte
	Value []byte
}

// KVList is a kv_scan result: entries in key order, and More set when the
// scan stopped at its limit.
type KVList struct {
	Entries []KVPair
	More    bool
}

// Attr is one span attribute (string-valued).
type Attr struct {
	Key   string
	Value string
}

// --- encoding ---

func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
func appendStr(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
func appendBytes(b []byte, s []byte) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
func header(b []byte, t RecordType) []byte { return append(b, EnvelopeVersion, byte(t)) }

func appendStrMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = appendU32(b, uint32(len(keys)))
	for _, k := range keys {
		b = appendStr(b, k)
		b = appendStr(b, m[k])
	}
	return b
}

// AppendMessage appends the envelope of m to b. Properties are written in
// key order, so equal messages encode to equal bytes.
func AppendMessage(b []byte, m *Message) []byte {
	b = header(b, RecMessage)
	b = appendU64(b, m.ID)
	b = appendStr(b, m.Type)
	b = appendBytes(b, m.Payload)
	b = appendStrMap(b, m.Properties)
	b = appendU32(b, uint32(len(m.VChannels)))
	for _, v := range m.VChannels {
		b = appendStr(b, v.Name)
		var f byte
		if v.Appended {
			f = 1
		}
		b = append(b, f)
		b = appendU64(b, v.LogicOffset)
		b = appendStr(b, v.PhysicalQueue)
		b = appendU64(b, v.TimeTick)
	}
	b = appendU32(b, m.Attempt)
	return appendStr(b, m.TraceParent)
}

func appendAssignments(b []byte, as []Assignment) []byte {
	b = appendU32(b, uint32(len(as)))
	for _, a := range as {
		b = appendU32(b, a.Queue)
		b = appendStr(b, a.Broker)
	}
	return b
}

// AppendPolicyInput appends the envelope of in to b.
func AppendPolicyInput(b []byte, in *PolicyInput) []byte {
	b = header(b, RecPolicyInput)
	b = appendStr(b, in.Operation)
	b = appendStr(b, in.Topic)
	b = appendU32(b, in.Queues)
	b = appendAssignments(b, in.Current)
	b = appendU32(b, uint32(len(in.Brokers)))
	for _, br := range in.Brokers {
		b = appendStr(b, br.Name)
		b = appendU32(b, br.Load)
		b = appendStrMap(b, br.Labels)
	}
	return b
}

// AppendPolicyOutput appends the envelope of out to b.
func AppendPolicyOutput(b []byte, out *PolicyOutput) []byte {
	b = header(b, RecPolicyOutput)
	return appendAssignments(b, out.Assignments)
}

// AppendResourceKeys appends the envelope of keys to b.
func AppendResourceKeys(b []byte, keys []ResourceKey) []byte {
	b = header(b, RecResourceKeys)
	b = appendU32(b, uint32(len(keys)))
	for _, k := range keys {
		b = appendStr(b, k.Domain)
		b = appendStr(b, k.Key)
		b = append(b, byte(k.Mode))
	}
	return b
}

// AppendKVList appends the envelope of l to b.
func AppendKVList(b []byte, l *KVList) []byte {
	b = header(b, RecKVList)
	var more byte
	if l.More {
		more = 1
	}
	b = append(b, more)
	b = appendU32(b, uint32(len(l.Entries)))
	for _, e := range l.Entries {
		b = appendBytes(b, e.Key)
		b = appendBytes(b, e.Value)
	}
	return b
}

// AppendAttrs appends the envelope of attrs to b.
func AppendAttrs(b []byte, attrs []Attr) []byte {
	b = header(b, RecAttrs)
	b = appendU32(b, uint32(len(attrs)))
	for _, a := range attrs {
		b = appendStr(b, a.Key)
		b = appendStr(b, a.Value)
	}
	return b
}

// --- decoding ---

// reader decodes an envelope. Field names (what, and a suffix such as
// " length") describe the field in an error; they are joined only when a
// decode fails, so reading a well-formed envelope builds no strings but its
// fields.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
}

// need reports whether n more bytes are there, failing with "truncated
// <what><suffix>" if not.
func (r *reader) need(n int, what, suffix string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b) < n {
		r.fail("truncated " + what + suffix)
		return false
	}
	return true
}

func (r *reader) u8(what string) byte {
	if !r.need(1, what, "") {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u32(what string) uint32 { return r.u32s(what, "") }

func (r *reader) u32s(what, suffix string) uint32 {
	if !r.need(4, what, suffix) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u64(what string) uint64 {
	if !r.need(8, what, "") {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// raw returns the next length-prefixed field, aliasing the input.
func (r *reader) raw(what, suffix string) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < 4 {
		r.fail("truncated " + what + suffix + " length")
		return nil
	}
	n := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	if uint64(n) > uint64(len(r.b)) {
		r.fail(what + suffix + " length past end")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str(what string) string { return string(r.raw(what, "")) }

func (r *reader) bytes(what string) []byte {
	v := r.raw(what, "")
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

// count reads a list count and checks that count elements of at least
// minSize bytes each fit in what is left.
func (r *reader) count(what string, minSize int) int {
	n := r.u32s(what, " count")
	if r.err != nil {
		return 0
	}
	if uint64(n)*uint64(minSize) > uint64(len(r.b)) {
		r.fail(what + " count past end")
		return 0
	}
	return int(n)
}

func (r *reader) header(t RecordType) {
	v := r.u8("version")
	typ := r.u8("record type")
	if r.err != nil {
		return
	}
	if v != EnvelopeVersion {
		r.err = fmt.Errorf("%w: unsupported version %d (want %d)", ErrMalformed, v, EnvelopeVersion)
		return
	}
	if RecordType(typ) != t {
		r.err = fmt.Errorf("%w: record type %d, want %d", ErrMalformed, typ, t)
	}
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	return r.err
}

func (r *reader) strMap(what string) map[string]string {
	n := r.count(what, 8)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for i := 0; i < n && r.err == nil; i++ {
		k := string(r.raw(what, " key"))
		m[k] = string(r.raw(what, " value"))
	}
	return m
}

// DecodeMessage decodes a Message envelope. Errors wrap ErrMalformed.
func DecodeMessage(b []byte) (Message, error) {
	r := reader{b: b}
	r.header(RecMessage)
	var m Message
	m.ID = r.u64("id")
	m.Type = r.str("type")
	m.Payload = r.bytes("payload")
	m.Properties = r.strMap("properties")
	if n := r.count("vchannels", 4+1+8+4+8); n > 0 {
		m.VChannels = make([]VChannel, n)
		for i := range m.VChannels {
			v := &m.VChannels[i]
			v.Name = r.str("vchannel name")
			f := r.u8("vchannel flags")
			if f > 1 {
				r.fail("vchannel flags")
			}
			v.Appended = f == 1
			v.LogicOffset = r.u64("logic offset")
			v.PhysicalQueue = r.str("physical queue")
			v.TimeTick = r.u64("time tick")
		}
	}
	m.Attempt = r.u32("attempt")
	m.TraceParent = r.str("traceparent")
	if err := r.end(); err != nil {
		return Message{}, err
	}
	return m, nil
}

func (r *reader) assignments() []Assignment {
	n := r.count("assignments", 8)
	if n == 0 {
		return nil
	}
	as := make([]Assignment, n)
	for i := range as {
		as[i].Queue = r.u32("queue")
		as[i].Broker = r.str("broker")
	}
	return as
}

// DecodePolicyInput decodes a PolicyInput envelope.
func DecodePolicyInput(b []byte) (PolicyInput, error) {
	r := reader{b: b}
	r.header(RecPolicyInput)
	var in PolicyInput
	in.Operation = r.str("operation")
	in.Topic = r.str("topic")
	in.Queues = r.u32("queues")
	in.Current = r.assignments()
	if n := r.count("brokers", 12); n > 0 {
		in.Brokers = make([]Broker, n)
		for i := range in.Brokers {
			in.Brokers[i].Name = r.str("broker name")
			in.Brokers[i].Load = r.u32("broker load")
			in.Brokers[i].Labels = r.strMap("broker labels")
		}
	}
	if err := r.end(); err != nil {
		return PolicyInput{}, err
	}
	return in, nil
}

// DecodePolicyOutput decodes a PolicyOutput envelope.
func DecodePolicyOutput(b []byte) (PolicyOutput, error) {
	r := reader{b: b}
	r.header(RecPolicyOutput)
	out := PolicyOutput{Assignments: r.assignments()}
	if err := r.end(); err != nil {
		return PolicyOutput{}, err
	}
	return out, nil
}

// DecodeResourceKeys decodes a ResourceKeys envelope. A mode other than
// Shared or Exclusive, or an empty domain or key, is malformed.
func DecodeResourceKeys(b []byte) ([]ResourceKey, error) {
	r := reader{b: b}
	r.header(RecResourceKeys)
	var keys []ResourceKey
	if n := r.count("resource keys", 9); n > 0 {
		keys = make([]ResourceKey, n)
		for i := range keys {
			keys[i].Domain = r.str("domain")
			keys[i].Key = r.str("key")
			m := r.u8("mode")
			if r.err == nil && (m > byte(Exclusive) || keys[i].Domain == "" || keys[i].Key == "") {
				r.fail(fmt.Sprintf("resource key %d: empty domain/key or mode %d", i, m))
			}
			keys[i].Mode = LockMode(m)
		}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return keys, nil
}

// DecodeKVList decodes a KVList envelope.
func DecodeKVList(b []byte) (KVList, error) {
	r := reader{b: b}
	r.header(RecKVList)
	var l KVList
	more := r.u8("more")
	if more > 1 {
		r.fail("more flag")
	}
	l.More = more == 1
	if n := r.count("entries", 8); n > 0 {
		l.Entries = make([]KVPair, n)
		for i := range l.Entries {
			l.Entries[i].Key = r.bytes("key")
			l.Entries[i].Value = r.bytes("value")
		}
	}
	if err := r.end(); err != nil {
		return KVList{}, err
	}
	return l, nil
}

// DecodeAttrs decodes an Attrs envelope.
func DecodeAttrs(b []byte) ([]Attr, error) {
	r := reader{b: b}
	r.header(RecAttrs)
	var attrs []Attr
	if n := r.count("attrs", 8); n > 0 {
		attrs = make([]Attr, n)
		for i := range attrs {
			attrs[i].Key = r.str("attr key")
			attrs[i].Value = r.str("attr value")
		}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return attrs, nil
}
