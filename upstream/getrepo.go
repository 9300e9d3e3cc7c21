// getrepo.go owns com.atproto.sync.getRepo: the request through the relay,
// guarded redirects (E14), and streaming the CAR to a scratch file under a
// byte cap (E5). The scratch file is removed on every error.

package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Download is a getRepo body on disk. The caller owns the file and must call
// Remove when done with it, on every outcome.
type Download struct {
	// DID is the repository requested.
	DID string
	// Path is the scratch file holding the CAR exactly as received; ""
	// when the body was small enough to stay in memory (Body).
	Path string
	// Body holds the CAR when it was at most Options.MemoryBodyBytes.
	Body []byte
	// Size is the number of body bytes written to Path.
	Size int64
	// FinalHost is host[:port] of the URL that answered (after redirects),
	// lower-cased; the port is present when the URL named one.
	FinalHost string
	// Redirects is the number of redirects followed.
	Redirects int
	// Duration covers request start to the last body byte.
	Duration time.Duration
}

// Open opens the CAR for reading: the scratch file, or the in-memory body.
func (d *Download) Open() (io.ReadCloser, error) {
	if d.Path == "" {
		return io.NopCloser(bytes.NewReader(d.Body)), nil
	}
	return os.Open(d.Path)
}

// Remove deletes the scratch file; removing twice is not an error.
func (d *Download) Remove() error {
	if d == nil || d.Path == "" {
		return nil
	}
	if err := os.Remove(d.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("upstream: remove scratch: %w", err)
	}
	return nil
}

type hopsKey struct{}

// GetRepo downloads the full repository of did through the relay
// (GET <relay>/xrpc/com.atproto.sync.getRepo?did=..., Accept:
// application/vnd.ipld.car), following at most MaxRedirects guarded
// redirects, and streams the body to a new file in the scratch dir.
//
// Error contract: every error is an *Error and no scratch file is left
// behind. Classify gives: ClassNotFound / ClassUnavailable from the XRPC
// error name; ClassRateLimited for 429 (RetryAfter(err) for the wait);
// ClassTransient for 5xx, 408, resets, unexpected EOF, connect, header and
// idle-body timeouts; ClassPermanent for other statuses, refused redirects
// (ErrForbiddenRedirect), too many redirects (ErrTooManyRedirects), a body
// over the cap (ErrTooLarge) or an invalid DID; ClassCanceled when ctx ends.
// The CAR is not parsed or verified here.
func (c *Client) GetRepo(ctx context.Context, did string) (*Download, error) {
	const op = "getRepo"
	d, err := c.getRepo(ctx, did)
	c.metrics.request(op, Classify(err))
	if err == nil {
		c.metrics.downloaded(d.Size)
	}
	return d, err
}

func (c *Client) getRepo(ctx context.Context, did string) (*Download, error) {
	const op = "getRepo"
	if _, err := syntax.ParseDID(did); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("invalid DID: %w", err), kind: ErrPermanent}
	}
	start := time.Now()
	hops := new(int)
	reqCtx, cancel := context.WithCancelCause(context.WithValue(ctx, hopsKey{}, hops))
	defer cancel(nil)
	q := url.Values{}
	q.Set("did", did)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, c.xrpcURL("com.atproto.sync.getRepo", q), nil)
	if err != nil {
		return nil, &Error{Op: op, Err: err, kind: ErrPermanent}
	}
	req.Header.Set("Accept", "application/vnd.ipld.car")
	req.Header.Set("User-Agent", c.opts.UserAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		host := hostOfURLError(err, req.URL)
		return nil, c.transportError(ctx, reqCtx, op, host, err)
	}
	defer resp.Body.Close()
	host := strings.ToLower(resp.Request.URL.Host)
	w := startIdleWatch(c.opts.IdleBodyTimeout, cancel)
	defer w.stop()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(ctx, op, host, resp, w)
	}
	if resp.ContentLength > c.opts.MaxCARBytes {
		return nil, &Error{Op: op, Host: host, StatusCode: resp.StatusCode,
			Err: fmt.Errorf("%w: Content-Length %d > %d", ErrTooLarge, resp.ContentLength, c.opts.MaxCARBytes), kind: ErrTooLarge}
	}
	body := io.Reader(&watchedReader{r: resp.Body, w: w})
	var prefix []byte
	if lim := c.opts.MemoryBodyBytes; lim > 0 && resp.ContentLength <= lim {
		// Small (or unannounced): read up to the limit into memory.
		buf, err := io.ReadAll(io.LimitReader(body, lim+1))
		if err != nil {
			return nil, c.transportError(ctx, reqCtx, op, host, err)
		}
		if int64(len(buf)) <= lim {
			return &Download{DID: did, Body: buf, Size: int64(len(buf)), FinalHost: host, Redirects: *hops, Duration: time.Since(start)}, nil
		}
		prefix = buf // larger than announced: spill to the scratch file
	}
	f, err := os.CreateTemp(c.opts.ScratchDir, "getrepo-*.car")
	if err != nil {
		// Our own disk, not upstream: still an *Error so callers have one
		// contract, but permanent so nobody hammers a full disk.
		return nil, &Error{Op: op, Host: host, Err: fmt.Errorf("scratch file: %w", err), kind: ErrPermanent}
	}
	n, err := c.copyCapped(f, io.MultiReader(bytes.NewReader(prefix), body))
	if cerr := f.Close(); err == nil && cerr != nil {
		err = &Error{Op: op, Host: host, Err: fmt.Errorf("scratch file: %w", cerr), kind: ErrPermanent}
	}
	if err != nil {
		_ = os.Remove(f.Name())
		var ue *Error
		if errors.As(err, &ue) {
			ue.Op, ue.Host, ue.StatusCode = op, host, resp.StatusCode
			return nil, ue
		}
		return nil, c.transportError(ctx, reqCtx, op, host, err)
	}
	return &Download{
		DID:       did,
		Path:      f.Name(),
		Size:      n,
		FinalHost: host,
		Redirects: *hops,
		Duration:  time.Since(start),
	}, nil
}

// copyCapped copies r to f, failing with an ErrTooLarge *Error as soon as
// more than MaxCARBytes arrive.
func (c *Client) copyCapped(f *os.File, r io.Reader) (int64, error) {
	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	buf := *bp
	var total int64
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			total += int64(n)
			if total > c.opts.MaxCARBytes {
				return total, &Error{Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, c.opts.MaxCARBytes), kind: ErrTooLarge}
			}
			if _, werr := f.Write(buf[:n]); werr != nil {
				return total, &Error{Err: fmt.Errorf("scratch file: %w", werr), kind: ErrPermanent}
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}
