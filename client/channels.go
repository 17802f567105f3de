package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/wire"
)

// Vchannel read/append types on the wire.
type (
	ReadResult    = wire.ReadResult
	Message       = wire.ChannelMessage
	ChannelRecord = wire.AppendRecord
	AppendRequest = wire.AppendRequest
	AppendResult  = wire.AppendResult
)

func channelPath(vchannel string) (string, error) {
	t, q, ok := strings.Cut(vchannel, "/")
	if !ok || t == "" || q == "" || strings.Contains(q, "/") {
		return "", fmt.Errorf("vchannel %q: want topic/N", vchannel)
	}
	return "/v1/channels/" + url.PathEscape(t) + "/" + url.PathEscape(q), nil
}

// ReadChannel reads up to limit messages of vchannel from logic offset
// from; wait > 0 long-polls when nothing is there yet. An offset below min
// or above max is an *Error with code offset_out_of_range (details min, max).
func (c *Client) ReadChannel(ctx context.Context, vchannel string, from uint64, limit int, wait time.Duration) (*ReadResult, error) {
	p, err := channelPath(vchannel)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("from", fmt.Sprint(from))
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var out ReadResult
	if err := c.Do(ctx, http.MethodGet, p+"/messages?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AppendChannel appends records to vchannel (a producer id and seq make a
// retry return the original positions).
func (c *Client) AppendChannel(ctx context.Context, vchannel string, req *AppendRequest) (*AppendResult, error) {
	p, err := channelPath(vchannel)
	if err != nil {
		return nil, err
	}
	var out AppendResult
	if err := c.Do(ctx, http.MethodPost, p+"/messages", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ChannelBounds returns vchannel's min and max logic offsets.
func (c *Client) ChannelBounds(ctx context.Context, vchannel string) (*QueueOffsets, error) {
	p, err := channelPath(vchannel)
	if err != nil {
		return nil, err
	}
	var out QueueOffsets
	if err := c.Do(ctx, http.MethodGet, p, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
