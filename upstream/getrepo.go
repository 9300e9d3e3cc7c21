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
	"log/slog"
	"net/http"
	"net/url"
	"os"
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
	// in its canonical form (CanonicalHost: lower-cased, no trailing dot,
	// the port present when the URL named one other than its scheme's
	// default).
	FinalHost string
	// Redirects is the number of redirects followed.
	Redirects int
	// Duration covers request start to the last body byte.
	Duration time.Duration

	spill *spill // the scratch budget Path holds; returned by Remove
}

// Open opens the CAR for reading: the scratch file, or the in-memory body.
func (d *Download) Open() (io.ReadCloser, error) {
	if d.Path == "" {
		return io.NopCloser(bytes.NewReader(d.Body)), nil
	}
	return os.Open(d.Path)
}

// Remove deletes the scratch file and returns its bytes to the scratch
// budget; removing twice is not an error.
func (d *Download) Remove() error {
	if d == nil || d.Path == "" {
		return nil
	}
	defer d.spill.release()
	if err := os.Remove(d.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("upstream: remove scratch: %w", err)
	}
	return nil
}

// GetRepo downloads the full repository of did through the relay
// (GET <relay>/xrpc/com.atproto.sync.getRepo?did=..., Accept:
// application/vnd.ipld.car), following at most MaxRedirects guarded
// redirects, and streams the body to a new file in the scratch dir.
//
// Error contract: every error is an *Error and no scratch file is left
// behind. Classify gives: ClassNotFound / ClassUnavailable from the XRPC
// error name; ClassRateLimited for 429 (RetryAfter(err) for the wait);
// ClassTransient for 5xx, 408, resets, unexpected EOF, connect, header and
// idle-body timeouts, a body under the minimum throughput (ErrSlowBody) and
// a redirect target at its concurrency cap (ErrHostBusy); ClassPermanent
// for other statuses, refused redirects (ErrForbiddenRedirect), too many
// redirects (ErrTooManyRedirects), a body over the cap or over the whole
// scratch budget (ErrTooLarge) or an invalid DID; ClassLocal when our own
// scratch space refuses the spill (ErrLocal: budget held by other
// downloads, volume below its free-space floor, a failed write such as
// ENOSPC); ClassCanceled when ctx ends. The CAR is not parsed or verified
// here.
func (c *Client) GetRepo(ctx context.Context, did string) (*Download, error) {
	const op = "getRepo"
	d, err := c.getRepo(ctx, nil, did)
	c.metrics.request(op, Classify(err))
	if err == nil {
		c.metrics.downloaded(d.Size)
	}
	return d, err
}

// getRepo downloads did from the relay (direct nil: its redirect picks the
// PDS) or straight from the host direct, whose download slot it takes first and whose
// announced rate limit it keeps to (hosts.go).
func (c *Client) getRepo(ctx context.Context, direct *url.URL, did string) (*Download, error) {
	const op = "getRepo"
	if _, err := syntax.ParseDID(did); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("invalid DID: %w", err), kind: ErrPermanent}
	}
	start := time.Now()
	st := new(getRepoState)
	defer c.releaseSlot(st)
	base := c.relay
	if direct != nil {
		base = direct
		if err := c.direct(op, st, direct); err != nil {
			return nil, err
		}
	}
	reqCtx, cancel := context.WithCancelCause(context.WithValue(ctx, getRepoStateKey{}, st))
	defer cancel(nil)
	q := url.Values{}
	q.Set("did", did)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, xrpcURL(base, "com.atproto.sync.getRepo", q), nil)
	if err != nil {
		return nil, &Error{Op: op, Err: err, kind: ErrPermanent}
	}
	req.Header.Set("Accept", "application/vnd.ipld.car")
	req.Header.Set("User-Agent", c.opts.UserAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		host := hostOfURLError(err, req.URL)
		return nil, c.triedErr(ctx, st, c.transportError(ctx, reqCtx, op, host, err), urlOfError(err, req.URL))
	}
	c.triedHost(st, canonicalHostPort(resp.Request.URL), tryAnswered)
	defer resp.Body.Close()
	host := CanonicalHost(resp.Request.URL.Scheme, resp.Request.URL.Host)
	c.pace.observe(canonicalHostPort(resp.Request.URL), resp.StatusCode, resp.Header)
	w := startIdleWatch(c.opts.IdleBodyTimeout, cancel)
	defer w.stop()
	body, stopRate := c.rated(&watchedReader{r: resp.Body, w: w}, cancel)
	defer stopRate()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(ctx, reqCtx, op, host, resp, body)
	}
	if resp.ContentLength > c.opts.MaxCARBytes {
		return nil, &Error{Op: op, Host: host, StatusCode: resp.StatusCode,
			Err: fmt.Errorf("%w: Content-Length %d > %d", ErrTooLarge, resp.ContentLength, c.opts.MaxCARBytes), kind: ErrTooLarge}
	}
	d, err := c.readBody(resp, body)
	if err != nil {
		var ue *Error
		if errors.As(err, &ue) && ue.Op == "" {
			ue.Op, ue.Host, ue.StatusCode = op, host, resp.StatusCode
			return nil, ue
		}
		return nil, c.transportError(ctx, reqCtx, op, host, err)
	}
	d.DID, d.FinalHost, d.Redirects, d.Duration = did, host, st.hops, time.Since(start)
	return d, nil
}

// readBody reads a 200 body: into memory when it fits MemoryBodyBytes, else
// into a scratch file within the scratch budget and above the free-space
// floor. Errors of its own are *Error without Op; the file is removed and
// its budget returned on every error.
func (c *Client) readBody(resp *http.Response, body io.Reader) (*Download, error) {
	var prefix []byte
	if lim := c.opts.MemoryBodyBytes; lim > 0 && resp.ContentLength <= lim {
		// Small (or unannounced): read up to the limit into memory.
		buf, err := readAllSized(io.LimitReader(body, lim+1), resp.ContentLength)
		if err != nil {
			return nil, err
		}
		if int64(len(buf)) <= lim {
			return &Download{Body: buf, Size: int64(len(buf))}, nil
		}
		prefix = buf // larger than announced: spill to the scratch file
	}
	if resp.ContentLength > c.scratch.budget {
		return nil, &Error{Err: fmt.Errorf("%w: Content-Length %d > scratch budget %d", ErrTooLarge, resp.ContentLength, c.scratch.budget), kind: ErrTooLarge}
	}
	p := &spill{space: c.scratch}
	// Before the first byte: room for the announced length (or a first
	// read) above the floor.
	if err := c.scratch.checkFloor(max(resp.ContentLength, 0)); err != nil {
		return nil, err
	}
	p.next = floorCheckEvery
	f, err := os.CreateTemp(c.opts.ScratchDir, "getrepo-*.car")
	if err != nil {
		return nil, c.scratchWriteError(err)
	}
	n, err := c.copyCapped(f, io.MultiReader(bytes.NewReader(prefix), body), p)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = c.scratchWriteError(cerr)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		p.release()
		return nil, err
	}
	return &Download{Path: f.Name(), Size: n, spill: p}, nil
}

// readAllSized is io.ReadAll into one buffer of the announced length
// (plus the byte that shows a longer body) when there is one: a single
// allocation instead of io.ReadAll's growing chunks and final copy. A
// body longer than announced keeps growing; an unannounced one (size < 0)
// is read by io.ReadAll.
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, size+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// scratchWriteError is a failed scratch create, write or close: our own
// disk (ENOSPC, EIO, a vanished directory), never the upstream's fault.
func (c *Client) scratchWriteError(err error) error {
	c.trips.trip(slog.LevelWarn, limitScratchWrite, "upstream: scratch write failed; spills back off", "dir", c.opts.ScratchDir, "err", err)
	return &Error{Err: fmt.Errorf("%w: scratch file: %w", ErrLocal, err), kind: ErrLocal}
}

// copyCapped copies r to f, failing with an ErrTooLarge *Error as soon as
// more than MaxCARBytes (or more than the whole scratch budget) arrive, and
// with an ErrLocal *Error when the scratch budget or the volume's floor
// refuses more.
func (c *Client) copyCapped(f *os.File, r io.Reader, p *spill) (int64, error) {
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
			if err := p.grow(int64(n), total); err != nil {
				return total, err
			}
			if _, werr := f.Write(buf[:n]); werr != nil {
				return total, c.scratchWriteError(werr)
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
