package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/wire"
)

// Static-topic types on the wire (see docs/api.md).
type (
	TopicRequest = wire.TopicRequest
	TopicChange  = wire.TopicChange
	TopicInfo    = wire.TopicInfo
	Topic        = wire.Topic
	QueueOffsets = wire.QueueOffsets
	GroupOffset  = wire.GroupOffset
	Retention    = wire.RetentionRequest
	Translation  = wire.Translation
)

// CreateTopic creates a static topic (req.Topic, req.Queues, brokers,
// policy, retention) and returns the change with the new topic's info.
func (c *Client) CreateTopic(ctx context.Context, req *TopicRequest) (*TopicChange, error) {
	var out TopicChange
	return &out, c.Do(ctx, http.MethodPost, "/v1/topics", req, &out)
}

// GrowTopic grows topic to req.Queues logic queues.
func (c *Client) GrowTopic(ctx context.Context, topic string, req *TopicRequest) (*TopicChange, error) {
	var out TopicChange
	return &out, c.Do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(topic)+"/grow", req, &out)
}

// RemapTopic remaps topic onto req.Brokers with req.Policy (req.DryRun to
// preview the moved queues).
func (c *Client) RemapTopic(ctx context.Context, topic string, req *TopicRequest) (*TopicChange, error) {
	var out TopicChange
	return &out, c.Do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(topic)+"/remap", req, &out)
}

// DeleteTopic deletes topic and its data (admin).
func (c *Client) DeleteTopic(ctx context.Context, topic string) (*TopicChange, error) {
	var out TopicChange
	return &out, c.Do(ctx, http.MethodDelete, "/v1/topics/"+url.PathEscape(topic), nil, &out)
}

// DeleteTopicDryRun checks that topic can be deleted and returns the
// change it would make, without deleting anything.
func (c *Client) DeleteTopicDryRun(ctx context.Context, topic string) (*TopicChange, error) {
	var out TopicChange
	return &out, c.Do(ctx, http.MethodDelete, "/v1/topics/"+url.PathEscape(topic)+"?dry_run=true", nil, &out)
}

// TranslateLogic returns where logic offset of vchannel ("topic/N") is
// stored: segment, broker, physical queue and physical offset. An offset
// that is not mapped is an *Error with code offset_out_of_range (details
// min, max).
func (c *Client) TranslateLogic(ctx context.Context, vchannel string, offset uint64) (*Translation, error) {
	p, err := topicQueuePath(vchannel)
	if err != nil {
		return nil, err
	}
	var out Translation
	if err := c.Do(ctx, http.MethodGet, p+"/translate?logic_offset="+strconv.FormatUint(offset, 10), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TranslatePhysical returns the topic, logic queue and logic offset of
// physical offset of broker's physical queue queueID. A physical queue no
// topic maps is not_found; an offset outside its segment is
// offset_out_of_range.
func (c *Client) TranslatePhysical(ctx context.Context, broker string, queueID, offset uint64) (*Translation, error) {
	var out Translation
	path := "/v1/brokers/" + url.PathEscape(broker) + "/queues/" + strconv.FormatUint(queueID, 10) +
		"/translate?physical_offset=" + strconv.FormatUint(offset, 10)
	if err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func topicQueuePath(vchannel string) (string, error) {
	i := strings.LastIndexByte(vchannel, '/')
	t, q := vchannel[:max(i, 0)], vchannel[i+1:]
	n, err := strconv.ParseUint(q, 10, 31)
	if i <= 0 || err != nil || strconv.FormatUint(n, 10) != q {
		return "", fmt.Errorf("client: vchannel %q: want topic/N", vchannel)
	}
	return "/v1/topics/" + url.PathEscape(t) + "/queues/" + q, nil
}

// DescribeTopic returns topic's logic queues with their segments and the
// consumer groups' lag.
func (c *Client) DescribeTopic(ctx context.Context, topic string) (*TopicInfo, error) {
	var out TopicInfo
	if err := c.Do(ctx, http.MethodGet, "/v1/topics/"+url.PathEscape(topic), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTopics returns one page of topics by name.
func (c *Client) ListTopics(ctx context.Context, p Page) (*List[Topic], error) {
	var out List[Topic]
	if err := c.Do(ctx, http.MethodGet, p.Query("/v1/topics"), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TopicOffsets returns min/max of every logic queue; a non-zero at adds
// the first offset at or after that time.
func (c *Client) TopicOffsets(ctx context.Context, topic string, at time.Time) ([]QueueOffsets, error) {
	path := "/v1/topics/" + url.PathEscape(topic) + "/offsets"
	if !at.IsZero() {
		path += "?time=" + url.QueryEscape(at.Format(time.RFC3339Nano))
	}
	var out List[QueueOffsets]
	if err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// CommitGroupOffset stores group's next offset for vchannel.
func (c *Client) CommitGroupOffset(ctx context.Context, group, vchannel string, offset uint64) (*GroupOffset, error) {
	var out GroupOffset
	body := wire.CommitOffsetRequest{VChannel: vchannel, Offset: &offset}
	if err := c.Do(ctx, http.MethodPost, "/v1/groups/"+url.PathEscape(group)+"/offsets", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetGroupOffset returns group's offset, min, max and lag on vchannel.
func (c *Client) GetGroupOffset(ctx context.Context, group, vchannel string) (*GroupOffset, error) {
	var out GroupOffset
	path := "/v1/groups/" + url.PathEscape(group) + "/offsets?vchannel=" + url.QueryEscape(vchannel)
	if err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GroupLag returns group's offset and lag on every logic queue of topic.
func (c *Client) GroupLag(ctx context.Context, group, topic string) ([]GroupOffset, error) {
	var out List[GroupOffset]
	path := "/v1/groups/" + url.PathEscape(group) + "/lag?topic=" + url.QueryEscape(topic)
	if err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}
