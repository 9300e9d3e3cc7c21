package main

// bootstrap.go owns the bootstrap measurement of one shape: a devnet of
// accounts × mean records, a serve on a fresh data dir, the serve process's
// CPU, wall time and peak RSS until the bootstrap completes, and the store's
// bytes on disk per archived event after a manual compaction.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/backstream/backstream/archive"
)

type shape struct{ Accounts, Records int }

func (s shape) String() string { return fmt.Sprintf("%dx%d", s.Accounts, s.Records) }

// bootRun is one measured bootstrap. The JSON names are those of the
// result files written before the steady-state rows existed.
type bootRun struct {
	Shape              string  `json:"shape"`
	Mode               string  `json:"mode,omitempty"` // serve --enumerate: hosts or relay ("": the default)
	Run                int     `json:"run"`
	Repos              int64   `json:"repos_complete"`
	Records            int64   `json:"records"`
	BootstrapCPUSecs   float64 `json:"bootstrap_cpu_seconds"`
	RecordsPerCPUSec   float64 `json:"records_per_cpu_second"`
	BootstrapWallSecs  float64 `json:"bootstrap_wall_seconds"`
	RecordsPerSec      float64 `json:"records_per_second"`
	ReposPerSec        float64 `json:"repos_per_second"`
	PeakRSSBytes       int64   `json:"peak_rss_bytes"`
	ArchiveEvents      int64   `json:"archive_events"`
	StoreBytesOnDisk   int64   `json:"store_bytes_on_disk"`     // as serve left it
	StoreBytesApparent int64   `json:"store_bytes_apparent"`    // as serve left it
	CompactedBytes     int64   `json:"compacted_store_bytes"`   // on disk, after flush + full compaction
	BytesPerEvent      float64 `json:"bytes_on_disk_per_event"` // compacted / archive events
	// IndexBytes is the compacted store's compaction index (rec/, tomb/)
	// and replay index (xc/, xd/, xm/), each written alone as bottom-level
	// tables (archive.Store.IndexDiskUsage); FirstChainPerEvent is the rest
	// of the compacted store (event rows and the state the bootstrap keeps)
	// per archive event.
	IndexBytes         archive.IndexUsage `json:"index_bytes"`
	FirstChainPerEvent float64            `json:"first_chain_bytes_per_event"`
	ApparentPerEvent   float64            `json:"apparent_bytes_per_event"` // as left by serve / archive events
	SteadyStateSecs    float64            `json:"seconds_to_steady_state"`
	// LiveRecords are the records the network still has (of accounts
	// neither deleted nor taken down) when steady state is reached, after
	// the end-of-merging compaction pass; BytesPerLiveRecord is
	// CompactedBytes over them.
	LiveRecords        int64   `json:"live_records"`
	BytesPerLiveRecord float64 `json:"bytes_on_disk_per_live_record"`
	ArchiveRows        int64   `json:"archive_rows"` // rows left in ev/ (the tip minus what compaction removed)
	// Resolutions are the DID documents resolved over the network until the
	// bootstrap completed (backstream_ident_resolutions_total; 0 with
	// --verify off), ResolutionsPerRepo over every repo known then, whatever
	// its status (the live traffic's #identity events re-resolve a few).
	Resolutions        int64   `json:"ident_resolutions"`
	ResolutionsPerRepo float64 `json:"ident_resolutions_per_repo"`
}

// measureBootstrap runs one bootstrap of sh and returns its numbers.
func measureBootstrap(parent context.Context, o options, sh shape, mode string) (r bootRun, err error) {
	ctx, cancel := context.WithTimeout(parent, o.timeout)
	defer cancel()
	r.Shape, r.Mode = sh.String(), mode
	started := time.Now()
	w, err := startBootWorld(ctx, o, o.bin, sh, "--enumerate", mode)
	if err != nil {
		return r, err
	}
	defer w.close()
	serve, base, admin, data, relay := w.serve, w.base, w.admin, w.data, w.relay

	c := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	bootstrapDone := false
	for {
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("no steady_state: %w (serve log: %s)", ctx.Err(), tail(serve.log.Name()))
		case <-serve.exited:
			return r, serve.alive()
		case <-tick.C:
		}
		cpu, cpuErr := serve.cpu()
		var st status
		if err := getJSON(c, base+"/status", &st); err != nil || cpuErr != nil {
			continue
		}
		if !bootstrapDone && st.BackfillCompletedAt != nil && st.BackfillStartedAt != nil {
			bootstrapDone = true
			r.BootstrapCPUSecs = cpu
			m, err := scrape(c, admin+"/metrics")
			if err != nil {
				return r, err
			}
			recs, ok := m.sum("backstream_backfill_records_total")
			if !ok {
				return r, errors.New("/metrics: no backstream_backfill_records_total")
			}
			r.Records = int64(recs)
			r.Repos = st.Repos["complete"]
			res, _ := m.sum("backstream_ident_resolutions_total")
			r.Resolutions = int64(res)
			var known int64 // every repo, whatever its status: each is one account
			for _, n := range st.Repos {
				known += n
			}
			if known > 0 {
				r.ResolutionsPerRepo = res / float64(known)
			}
			r.BootstrapWallSecs = st.BackfillCompletedAt.Sub(*st.BackfillStartedAt).Seconds()
		}
		if bootstrapDone && st.Phase == "steady_state" {
			r.SteadyStateSecs = time.Since(started).Seconds()
			if r.PeakRSSBytes, err = vmHWM(serve.pid()); err != nil {
				return r, err
			}
			r.ArchiveEvents = int64(st.Archive.TipSeq)
			if r.LiveRecords, err = devnetLiveRecords(c, relay); err != nil {
				return r, err
			}
			break
		}
	}
	if err := serve.stop(time.Minute); err != nil {
		return r, err
	}
	if r.StoreBytesOnDisk, r.StoreBytesApparent, err = dirSize(filepath.Join(data, "store")); err != nil {
		return r, err
	}
	if r.ArchiveRows, r.IndexBytes, err = compact(data); err != nil {
		return r, err
	}
	if r.CompactedBytes, _, err = dirSize(filepath.Join(data, "store")); err != nil {
		return r, err
	}
	if r.BootstrapCPUSecs > 0 {
		r.RecordsPerCPUSec = float64(r.Records) / r.BootstrapCPUSecs
	}
	if r.BootstrapWallSecs > 0 {
		r.RecordsPerSec = float64(r.Records) / r.BootstrapWallSecs
		r.ReposPerSec = float64(r.Repos) / r.BootstrapWallSecs
	}
	if r.ArchiveEvents > 0 {
		r.BytesPerEvent = float64(r.CompactedBytes) / float64(r.ArchiveEvents)
		r.FirstChainPerEvent = float64(r.CompactedBytes-int64(r.IndexBytes.Total())) / float64(r.ArchiveEvents)
		r.ApparentPerEvent = float64(r.StoreBytesApparent) / float64(r.ArchiveEvents)
	}
	if r.LiveRecords > 0 {
		r.BytesPerLiveRecord = float64(r.CompactedBytes) / float64(r.LiveRecords)
	}
	return r, nil
}

// bootWorld is one bootstrap's temporary dir, its devnet of sh (run by
// o.devnet()) and a serve of serveBin on a fresh data dir in it, with
// extra appended to its arguments.
type bootWorld struct {
	dir, data, relay, base, admin string
	serveArgs                     []string
	devnet, serve                 *proc
}

// startBootWorld starts a bootWorld; close ends it.
func startBootWorld(ctx context.Context, o options, serveBin string, sh shape, extra ...string) (w *bootWorld, err error) {
	w = &bootWorld{serveArgs: append(append([]string{"--backfill-workers", strconv.Itoa(o.workers), "--capture-wait", "5s"}, extra...), o.serveArgs...)}
	if w.dir, err = os.MkdirTemp("", "backstream-bench-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	w.devnet, w.relay, err = startDevnet(ctx, o.devnet(), w.dir, "devnet", devnetArgs{Accounts: sh.Accounts, Records: sh.Records, Rate: o.rate})
	if err != nil {
		return nil, err
	}
	w.data = filepath.Join(w.dir, "data")
	w.serve, w.base, w.admin, err = startServe(serveBin, w.dir, "serve", w.relay, w.data, w.serveArgs...)
	return w, err
}

// close kills what is still running and removes the temporary dir.
func (w *bootWorld) close() {
	for _, p := range []*proc{w.serve, w.devnet} {
		if p != nil {
			p.kill()
		}
	}
	os.RemoveAll(w.dir)
}

// compact opens a stopped store, flushes and compacts it fully, counts its
// ev/ rows, measures its indexes and closes it: the manual compaction
// before the bytes-per-event measurement.
func compact(dataDir string) (rows int64, idx archive.IndexUsage, err error) {
	s, err := archive.Open(dataDir, archive.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, idx, fmt.Errorf("compact: %w", err)
	}
	db := s.DB()
	err = db.Flush()
	if err == nil {
		err = db.Compact([]byte{0}, bytes.Repeat([]byte{0xff}, 64), true)
	}
	if err == nil {
		var it *archive.EventIter
		if it, err = s.Events(0); err == nil {
			for it.Next() {
				rows++
			}
			err = it.Close()
		}
	}
	if err == nil {
		idx, err = s.IndexDiskUsage()
	}
	return rows, idx, errors.Join(err, s.Close())
}
