// firehose.go owns dialing com.atproto.sync.subscribeRepos. Reading,
// cursor handling and reconnects belong to package firehose.

package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// DefaultFirehoseReadLimit bounds one websocket message when DialFirehose is
// given readLimit <= 0. A relay caps a #commit's blocks at 2,000,000 bytes.
const DefaultFirehoseReadLimit = 10 << 20

// firehoseHandshakeTimeout bounds connect + TLS + the websocket upgrade.
const firehoseHandshakeTimeout = 30 * time.Second

// SubscribeURL returns the subscribeRepos URL for relay: http→ws,
// https→wss, a bare host → wss, ws/wss kept, any base path kept. A nil cursor
// means "live tail"; cursor N asks for events with seq > N (0 = oldest
// retained).
func SubscribeURL(relay string, cursor *int64) string {
	relay = strings.TrimSpace(relay)
	if !strings.Contains(relay, "://") {
		relay = "wss://" + relay
	}
	u, err := url.Parse(relay)
	if err != nil {
		// Unparseable: return something that fails loudly at dial time.
		return relay
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/xrpc/com.atproto.sync.subscribeRepos"
	u.RawPath = ""
	u.RawQuery = ""
	u.Fragment = ""
	if cursor != nil {
		u.RawQuery = "cursor=" + strconv.FormatInt(*cursor, 10)
	}
	return u.String()
}

// DialFirehose opens a subscribeRepos websocket at relay from cursor and sets
// its read limit (readLimit <= 0: DefaultFirehoseReadLimit). The relay is the
// operator's configuration, so no address policy applies. Errors are *Error
// with Op "subscribeRepos": a refused upgrade carries the HTTP status and the
// XRPC error name (Classify: 429 rate limited, 5xx transient, other 4xx
// permanent); a network failure is transient; ctx ending is ClassCanceled.
func DialFirehose(ctx context.Context, relay string, cursor *int64, readLimit int64) (*websocket.Conn, error) {
	const op = "subscribeRepos"
	if readLimit <= 0 {
		readLimit = DefaultFirehoseReadLimit
	}
	target := SubscribeURL(relay, cursor)
	u, perr := url.Parse(target)
	if perr != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return nil, &Error{Op: op, Err: fmt.Errorf("invalid relay URL %q", relay), kind: ErrPermanent}
	}
	d := websocket.Dialer{
		Proxy:            nil,
		HandshakeTimeout: firehoseHandshakeTimeout,
		ReadBufferSize:   64 << 10,
		WriteBufferSize:  4 << 10,
	}
	hdr := http.Header{}
	hdr.Set("User-Agent", DefaultUserAgent)
	conn, resp, err := d.DialContext(ctx, target, hdr)
	if err != nil {
		e := &Error{Op: op, Host: CanonicalHost(u.Scheme, u.Host), Err: err}
		if resp != nil {
			e.StatusCode = resp.StatusCode
			now := time.Now()
			e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
			e.Reset = parseReset(resp.Header.Get("Ratelimit-Reset"))
			if resp.Body != nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
				_ = resp.Body.Close()
				var xe struct {
					Error   any `json:"error"`
					Message any `json:"message"`
				}
				if json.Unmarshal(body, &xe) == nil {
					e.Name = boundedString(xe.Error, 256)
					e.Message = boundedString(xe.Message, 1024)
				}
			}
		}
		switch cerr := callerDone(ctx); {
		case cerr != nil:
			e.kind = cerr
		case resp != nil && resp.StatusCode != http.StatusSwitchingProtocols:
			e.kind = statusKind(resp.StatusCode, e.Name, e.Message)
		default:
			e.kind = kindOf(err)
			if e.kind == ErrPermanent && err == websocket.ErrBadHandshake {
				e.kind = ErrTransient
			}
		}
		return nil, e
	}
	conn.SetReadLimit(readLimit)
	return conn, nil
}
