package archive

// BenchmarkBulkIngest (a measurement, not a product change): what
// would writing a bootstrap's rows as externally built sstables, ingested
// with DB.Ingest, save against today's writer (synced batches through the
// WAL and memtable, flushes to L0, the L0 -> L6 compaction)?
//
// Both paths write the same stream into a fresh store opened as serve opens
// it (Open with default options: 96 MiB cache, 6 MiB memtables, the store's
// level options): the simulated network's records (worldUnits: one repo per
// unit of at most 1,024 records in MST order), a listing unit per 1,000
// repos (cursor/listrepos and cursor/listrepos_last Puts, every repo of the
// page recorded pending) and each repo's completion (repo/ complete and its
// ident/ Put) in its last unit.
//
//   - writer: the real Writer (serve's BulkLinger), fed as fast as it takes
//     units.
//   - ingest-G<n>: the writer's own code builds each batch (add, flushKeyed,
//     writeIndex, meta/counts: the exact encoding and the same batch
//     bounds), but instead of a commit the batch's entries are routed: ev/
//     rows into an sstable of the bottom level's options (RocksDBv2 at the
//     store's format, zstd, 64 KiB blocks, no filter) cut at n MiB, every
//     other key kept, sorted and deduplicated (last wins) into a state file
//     of L1-L5's options (zstd, 32 KiB blocks, the point-read filter) --
//     two files, below and above ev/, so that no file's bounds span ev/
//     ("-unsplit": one state file, which spans ev/ since cursor/ < ev/ <
//     meta/). The files of a group are ingested together (one DB.Ingest:
//     one version edit).
//   - "+cap": both paths also commit, after every 64 units, a synced
//     batch of 8 cap/ rows and cursor/relay, as the capture writer does
//     during a bootstrap: the memtable is never empty.
//
// Each run ends with db.Compact over the whole keyspace and waits until no
// flush or compaction is in progress: the same fully compacted end state.
// Reported: process CPU (getrusage: includes Pebble's goroutines) per
// million records from the first unit to that end, bytes in the store
// directory at the end, and for the ingest paths where each file landed.
//
//	BACKSTREAM_BULK_ROUNDS=3 flock /tmp/bench.lock go test ./archive -run '^$' -bench BulkIngest -benchtime 1x -v
//
// BACKSTREAM_BULK_SHAPE=accountsxmean (default 2000x200) and
// BACKSTREAM_BULK_CASES (comma-separated case names) narrow it;
// BACKSTREAM_BULK_TABLES=1 logs every table's bounds after the writes. The
// other cases (spanL6, flushFirst, ingestSplit, rangeCompact) are the traps
// and their fixes: see bulkCase.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/sstable"

	"github.com/backstream/backstream/internal/cputime"
)

type bulkCase struct {
	name      string
	ingestKiB int  // 0: the writer path; else the ev/ file size in KiB
	unsplit   bool // one state file spanning ev/
	capture   bool // a capture trickle after every batch
	// spanL6: before the run, a capture batch is committed and the store
	// compacted, so L6 starts with one table holding cap/, cursor/relay
	// and the creation batch's meta/ keys: its bounds span ev/, as after
	// any L0 -> L6 compaction of a flush taken while capture ran.
	spanL6 bool
	// flushFirst flushes the memtable right after Open: the creation
	// batch's meta/ keys get an L0 table of their own, so no flush holds
	// keys on both sides of ev/ (capture writes only cap/ and cursor/).
	flushFirst bool
	// ingestSplit reopens Pebble with the store's options plus
	// FormatVirtualSSTables (a one-way upgrade of the store: table format
	// Pebblev4) and Experimental.IngestSplit, which lets an ingested table
	// land in a level where it overlaps one table's bounds (not its data)
	// by splitting that table into two virtual ones (ingest.go:946-965,
	// 2031). The writer path gets the same format, for a fair pair.
	ingestSplit bool
	// rangeCompact: after every 8 ingests, manual compactions of the key
	// ranges below and above ev/, each on its own, so that no L0 table is
	// ever compacted together with one on the other side of ev/ (the
	// automatic L0 compaction does that: an L0 -> Lbase output spanning
	// ev/, which the next compaction into L6 merges with every ev/ table).
	rangeCompact bool
}

var bulkCases = []bulkCase{
	{name: "writer"},
	{name: "ingest-G0.25", ingestKiB: 256},
	{name: "ingest-G1", ingestKiB: 1 << 10},
	{name: "ingest-G4", ingestKiB: 4 << 10},
	{name: "ingest-G16", ingestKiB: 16 << 10},
	{name: "ingest-G64", ingestKiB: 64 << 10},
	{name: "ingest-G16-unsplit", ingestKiB: 16 << 10, unsplit: true},
	{name: "writer+cap", capture: true},
	{name: "ingest-G16+cap", ingestKiB: 16 << 10, capture: true},
	{name: "ingest-G16-unsplit+cap", ingestKiB: 16 << 10, unsplit: true, capture: true},
	{name: "writer+cap+spanL6", capture: true, spanL6: true},
	{name: "ingest-G4+cap+spanL6", ingestKiB: 4 << 10, capture: true, spanL6: true},
	{name: "ingest-G4+cap", ingestKiB: 4 << 10, capture: true},
	{name: "ingest-G4+cap+flushfirst", ingestKiB: 4 << 10, capture: true, flushFirst: true},
	{name: "ingest-G16+cap+flushfirst", ingestKiB: 16 << 10, capture: true, flushFirst: true},
	{name: "ingest-G4+cap+flushfirst+rangecompact", ingestKiB: 4 << 10, capture: true, flushFirst: true, rangeCompact: true},
	{name: "ingest-G64+cap+flushfirst", ingestKiB: 64 << 10, capture: true, flushFirst: true},
	{name: "writer+cap+spanL6+v4", capture: true, spanL6: true, ingestSplit: true},
	{name: "ingest-G4+cap+spanL6+split", ingestKiB: 4 << 10, capture: true, spanL6: true, ingestSplit: true},
}

var bulkWorld struct {
	once    sync.Once
	units   []*Unit
	records int
}

func BenchmarkBulkIngest(b *testing.B) {
	accounts, mean := 2000, 200
	if v := os.Getenv("BACKSTREAM_BULK_SHAPE"); v != "" {
		a, m, ok := strings.Cut(v, "x")
		accounts, _ = strconv.Atoi(a)
		mean, _ = strconv.Atoi(m)
		if !ok || accounts <= 0 || mean <= 0 {
			b.Fatalf("BACKSTREAM_BULK_SHAPE=%q: want AxM", v)
		}
	}
	bulkWorld.once.Do(func() { bulkWorld.units, bulkWorld.records = bootstrapUnits(b, accounts, mean) })
	want := map[string]bool{}
	if v := os.Getenv("BACKSTREAM_BULK_CASES"); v != "" {
		for _, n := range strings.Split(v, ",") {
			want[n] = true
		}
	}
	// -count repeats each case back to back; rounds alternate them
	// (writer, ingest, ..., writer, ingest, ...) in one process.
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("BACKSTREAM_BULK_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for r := 1; r <= rounds; r++ {
		for _, c := range bulkCases {
			if len(want) > 0 && !want[c.name] {
				continue
			}
			b.Run(fmt.Sprintf("%s/round%d", c.name, r), func(b *testing.B) {
				for n := 0; n < b.N; n++ {
					runBulk(b, c, bulkWorld.units, bulkWorld.records)
				}
			})
		}
	}
}

// bootstrapUnits is worldUnits with a bootstrap's state: a listing unit
// before every page of 1,000 repos (their repo/ rows pending, the listRepos
// cursors) and each repo's completion and ident/ Put in its last unit.
func bootstrapUnits(tb testing.TB, accounts, mean int) ([]*Unit, int) {
	_, units, records, _ := worldUnits(tb, accounts, mean)
	byDID := map[string][]*Unit{}
	var order []string
	for _, u := range units {
		did := u.Events[0].DID
		if _, ok := byDID[did]; !ok {
			order = append(order, did)
		}
		byDID[did] = append(byDID[did], u)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var out []*Unit
	for i, did := range order {
		if i%1000 == 0 {
			page := order[i:min(i+1000, len(order))]
			cur, _ := EncodeListCursor(ListCursor{Cursor: fmt.Sprintf("page-%06d", i/1000)})
			lu := &Unit{Puts: []KV{{Key: KeyCursorListRepos, Value: cur}, {Key: KeyCursorListLast, Value: cur}}}
			for _, d := range page {
				lu.Repos = append(lu.Repos, RepoUpdate{DID: d, Fields: FieldStatus | FieldActive,
					State: RepoState{Status: StatusPending, Active: true}})
			}
			out = append(out, lu)
		}
		us := byDID[did]
		n, bytes := 0, 0
		for _, u := range us {
			n += len(u.Events)
			for j := range u.Events {
				bytes += len(u.Events[j].Record)
			}
		}
		last := us[len(us)-1]
		last.Repos = []RepoUpdate{{DID: did,
			Fields: FieldStatus | FieldBackfillRev | FieldHost | FieldStarted | FieldCompleted | FieldRecords | FieldBytes,
			State: RepoState{Status: StatusComplete, BackfillRev: last.Events[0].Rev, Host: "pds-1.example.com",
				StartedUS: now, CompletedUS: now + 1000, Records: uint64(n), Bytes: uint64(bytes)}}}
		id, err := EncodeIdent(Ident{Key: "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF", PDS: "https://pds-1.example.com",
			Handle: strings.TrimPrefix(did, "did:plc:") + ".example.com", FetchedUS: now})
		if err != nil {
			tb.Fatal(err)
		}
		last.Puts = []KV{{Key: IdentKey(did), Value: id}}
		out = append(out, us...)
	}
	return out, records
}

// copyUnits copies the stream (the writer stamps Seq and TimeUS in place).
func copyUnits(units []*Unit) []*Unit {
	out := make([]*Unit, len(units))
	for i, u := range units {
		c := *u
		c.Events = append([]Event(nil), u.Events...)
		out[i] = &c
	}
	return out
}

func runBulk(b *testing.B, c bulkCase, units []*Unit, records int) {
	b.StopTimer()
	units = copyUnits(units)
	dir := b.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger}) // serve's options
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w, err := NewWriter(s, WriterOptions{Logger: quietLogger, BulkLinger: BulkLinger})
	if err != nil {
		b.Fatal(err)
	}
	var capt *captureTrickle
	if c.capture {
		capt = &captureTrickle{s: s}
	}
	if c.flushFirst {
		if err := s.DB().Flush(); err != nil {
			b.Fatal(err)
		}
	}
	if c.spanL6 {
		if err := (&captureTrickle{s: s, seq: 1 << 40}).commit(); err != nil {
			b.Fatal(err)
		}
		if err := s.DB().Compact([]byte{0}, []byte{0xff, 0xff}, true); err != nil {
			b.Fatal(err)
		}
		quiesce(b, s.DB())
		tables, err := s.DB().SSTables()
		if err != nil {
			b.Fatal(err)
		}
		for l, ts := range tables {
			for _, t := range ts {
				b.Logf("before the run: L%d table %s .. %s", l, t.Smallest.UserKey, t.Largest.UserKey)
			}
		}
	}
	if c.ingestSplit {
		reopenWithIngestSplit(b, s)
	}
	var ig *bulkIngester
	m0 := s.DB().Metrics()
	cpu0, t0 := cputime.Process(b).Seconds(), time.Now()
	b.StartTimer()
	if c.ingestKiB == 0 {
		writerPath(b, w, units, capt)
	} else {
		ig = newBulkIngester(b, s, w, filepath.Join(dir, "ingest"), int64(c.ingestKiB)<<10, !c.unsplit, capt)
		ig.rangeCompact = c.rangeCompact
		ig.run(units)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	mw := s.DB().Metrics() // at the end of the writes, before the compaction
	if os.Getenv("BACKSTREAM_BULK_TABLES") != "" {
		logTables(b, s.DB(), "after the writes")
	}
	cpuW, tW := cputime.Process(b).Seconds(), time.Now()
	if err := s.DB().Compact([]byte{0}, []byte{0xff, 0xff}, true); err != nil {
		b.Fatal(err)
	}
	quiesce(b, s.DB())
	b.StopTimer()
	cpu1, t1 := cputime.Process(b).Seconds(), time.Now()
	m1 := s.DB().Metrics()

	perM := func(cpu float64) float64 { return cpu / float64(records) * 1e6 }
	b.ReportMetric(perM(cpu1-cpu0), "cpu-s/Mrec")
	b.ReportMetric(perM(cpuW-cpu0), "write-cpu-s/Mrec")
	b.ReportMetric(float64(records)/(cpu1-cpu0), "rec/cpu-s")
	b.ReportMetric(t1.Sub(t0).Seconds(), "wall-s")
	// Obsolete tables are deleted in the background: wait for them before
	// the directory is measured (outside the CPU measured above).
	for deadline := time.Now().Add(30 * time.Second); ; {
		m := s.DB().Metrics()
		if m.Table.ObsoleteCount <= 0 && m.Table.ZombieCount <= 0 { // v1.1.5 can report -2 obsolete tables after an ingest split
			break
		}
		if time.Now().After(deadline) {
			b.Logf("obsolete tables still on disk after 30 s: %d (%d B), zombies %d (%d B)",
				m.Table.ObsoleteCount, m.Table.ObsoleteSize, m.Table.ZombieCount, m.Table.ZombieSize)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	du := dirBytes(b, filepath.Join(dir, StoreDir))
	b.ReportMetric(float64(du)/float64(records), "disk-B/rec")
	var sst int64
	for _, l := range m1.Levels {
		sst += l.Size
	}
	b.ReportMetric(float64(sst)/float64(records), "sst-B/rec")

	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d records, cpu %.2fs (writes %.2fs + compact %.2fs), wall %.2fs (writes %.2fs), store dir %d B (%.1f B/rec; sstables %d B, %.1f B/rec)\n",
		c.name, records, cpu1-cpu0, cpuW-cpu0, cpu1-cpuW, t1.Sub(t0).Seconds(), tW.Sub(t0).Seconds(), du, float64(du)/float64(records), sst, float64(sst)/float64(records))
	fmt.Fprintf(&sb, "  WAL written %d B; flushes %d; compactions %d (default %d, move %d, multilevel %d, elision %d, read %d, rewrite %d); during writes: flushes %d, compactions %d\n",
		m1.WAL.BytesWritten-m0.WAL.BytesWritten, m1.Flush.Count-m0.Flush.Count, m1.Compact.Count-m0.Compact.Count,
		m1.Compact.DefaultCount-m0.Compact.DefaultCount, m1.Compact.MoveCount-m0.Compact.MoveCount,
		m1.Compact.MultiLevelCount-m0.Compact.MultiLevelCount, m1.Compact.ElisionOnlyCount-m0.Compact.ElisionOnlyCount,
		m1.Compact.ReadCount-m0.Compact.ReadCount, m1.Compact.RewriteCount-m0.Compact.RewriteCount,
		mw.Flush.Count-m0.Flush.Count, mw.Compact.Count-m0.Compact.Count)
	var flushed, compacted, ingested, moved uint64
	for l := range m1.Levels {
		a, z := m0.Levels[l], m1.Levels[l]
		flushed += z.BytesFlushed - a.BytesFlushed
		compacted += z.BytesCompacted - a.BytesCompacted
		ingested += z.BytesIngested - a.BytesIngested
		moved += z.BytesMoved - a.BytesMoved
		if z.NumFiles == 0 && z.TablesIngested == a.TablesIngested && z.TablesCompacted == a.TablesCompacted && z.TablesFlushed == a.TablesFlushed && z.TablesMoved == a.TablesMoved {
			continue
		}
		fmt.Fprintf(&sb, "  L%d: end %d files %d B; ingested %d tables %d B; flushed %d tables %d B; compacted into %d tables %d B; moved in %d tables %d B; (after writes: %d files %d B, %d virtual)\n",
			l, z.NumFiles, z.Size, z.TablesIngested-a.TablesIngested, z.BytesIngested-a.BytesIngested,
			z.TablesFlushed-a.TablesFlushed, z.BytesFlushed-a.BytesFlushed,
			z.TablesCompacted-a.TablesCompacted, z.BytesCompacted-a.BytesCompacted,
			z.TablesMoved-a.TablesMoved, z.BytesMoved-a.BytesMoved, mw.Levels[l].NumFiles, mw.Levels[l].Size, mw.Levels[l].NumVirtualFiles)
	}
	fmt.Fprintf(&sb, "  bytes written: WAL %d + flushed %d + compacted %d + ingested %d = %d (moved %d, not written)\n",
		m1.WAL.BytesWritten-m0.WAL.BytesWritten, flushed, compacted, ingested,
		m1.WAL.BytesWritten-m0.WAL.BytesWritten+flushed+compacted+ingested, moved)
	if ig != nil {
		sb.WriteString(ig.summary())
		b.ReportMetric(float64(ig.evFiles)/(float64(ig.evBytes)/(1<<30)), "evfiles/GiB")
	}
	b.Log("\n" + sb.String())
}

// writerPath submits every unit to the real writer and waits for all the
// receipts; with capt, a capture commit after every captureEvery units.
func writerPath(b *testing.B, w *Writer, units []*Unit, capt *captureTrickle) {
	acks := NewAcks()
	ctx := context.Background()
	for i, u := range units {
		u.Acks = acks
		if err := w.Submit(ctx, u); err != nil {
			b.Fatal(err)
		}
		if capt != nil && (i+1)%captureEvery == 0 {
			if err := capt.commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	rc, err := acks.Wait(ctx, w, len(units))
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range rc {
		if r.Refused != nil {
			b.Fatal(r.Refused)
		}
	}
}

// captureEvery: units between two capture commits (about one per archive
// batch of 16,384 rows on 2,000 x 200), the same count in both paths.
const captureEvery = 64

// captureTrickle commits what the capture writer commits during a
// bootstrap: a few cap/ rows and cursor/relay, synced.
type captureTrickle struct {
	s       *Store
	seq     uint64
	commits int
}

func (c *captureTrickle) commit() error {
	bt := c.s.DB().NewBatch()
	defer bt.Close()
	ev := realisticEvent(int(c.seq))
	ev.Source = SourceLive
	for i := 0; i < 8; i++ {
		c.seq++
		ev.Seq, ev.TimeUS = c.seq, int64(1_700_000_000_000_000+c.seq)
		v, err := AppendEvent(nil, &ev)
		if err != nil {
			return err
		}
		_ = bt.Set(CaptureKey(c.seq), v, nil)
	}
	v, _ := EncodeSeqCursor(c.seq)
	_ = bt.Set(KeyCursorRelay, v, nil)
	c.commits++
	return bt.Commit(pebble.Sync)
}

// reopenWithIngestSplit closes s's Pebble and opens it again with
// openPebble's options plus FormatVirtualSSTables and IngestSplit (the
// store keeps its lock, cache and listener).
func reopenWithIngestSplit(b *testing.B, s *Store) {
	if err := s.db.Close(); err != nil {
		b.Fatal(err)
	}
	po := s.pebbleOptions(Options{}, nil)
	po.FormatMajorVersion = pebble.FormatVirtualSSTables
	po.Experimental.IngestSplit = func() bool { return true }
	db, err := pebble.Open(s.dir, po)
	if err != nil {
		b.Fatal(err)
	}
	s.db = db
}

// logTables logs every table's level and bounds but those of ev/ tables
// in L6 (counted).
func logTables(b *testing.B, db *pebble.DB, when string) {
	tables, err := db.SSTables()
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for l, ts := range tables {
		evL6 := 0
		for _, t := range ts {
			if l == 6 && hasPrefix(t.Smallest.UserKey, PrefixEvent) && hasPrefix(t.Largest.UserKey, PrefixEvent) {
				evL6++
				continue
			}
			lo, hi := t.Smallest.UserKey, t.Largest.UserKey
			fmt.Fprintf(&sb, "  L%d %s %d B: %.20q .. %.20q virtual=%v\n", l, t.FileNum, t.Size, lo, hi, t.Virtual)
		}
		if evL6 > 0 {
			fmt.Fprintf(&sb, "  L6: %d tables of ev/ only\n", evL6)
		}
	}
	b.Logf("tables %s:\n%s", when, sb.String())
}

// quiesce waits until no flush or compaction is in progress.
func quiesce(b *testing.B, db *pebble.DB) {
	for {
		m := db.Metrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling a condition; decides nothing by itself
	}
}

func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if os.IsNotExist(err) {
			return nil // an obsolete file Pebble deleted meanwhile
		}
		if err != nil {
			return err
		}
		if !info.IsDir() {
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// storeWriterOptions are the sstable options the store gives level
// (levelOptions), at the table format of the store's format major version.
func storeWriterOptions(s *Store, level int) sstable.WriterOptions {
	po := &pebble.Options{Levels: levelOptions()}
	po.EnsureDefaults()
	return po.MakeWriterOptions(level, s.DB().FormatMajorVersion().MaxTableFormat())
}

// bulkIngester is the ingest path: the writer's batches, routed into
// sstables instead of committed.
type bulkIngester struct {
	b      *testing.B
	s      *Store
	w      *Writer
	dir    string
	g      int64
	split  bool
	capt   *captureTrickle
	evOpts sstable.WriterOptions
	stOpts sstable.WriterOptions

	ev     *sstable.Writer
	evPath string
	evRows int
	state  []stateKV
	arena  []byte
	events []*Event // published to the live log once durable
	nfile  int

	// results
	ingests, evFiles, stateFiles int
	evBytes, stateBytes          int64
	landed                       map[string]map[int]int // file kind -> level -> files
	flushesForced                int                    // ingests during which a flush happened
	unmatched                    int
	maxGroupRows                 int
	rangeCompact                 bool
	rangeCompactions             int
}

type stateKV struct {
	k0, k1, v1 int
	del        bool
	order      int
}

func newBulkIngester(b *testing.B, s *Store, w *Writer, dir string, g int64, split bool, capt *captureTrickle) *bulkIngester {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return &bulkIngester{b: b, s: s, w: w, dir: dir, g: g, split: split, capt: capt,
		evOpts: storeWriterOptions(s, 6), stOpts: storeWriterOptions(s, 5),
		landed: map[string]map[int]int{}}
}

func (ig *bulkIngester) newFile(kind string) (*sstable.Writer, string) {
	ig.nfile++
	path := filepath.Join(ig.dir, fmt.Sprintf("%06d-%s.sst", ig.nfile, kind))
	f, err := ig.s.fs.Create(path)
	if err != nil {
		ig.b.Fatal(err)
	}
	opts := ig.stOpts
	if kind == "ev" {
		opts = ig.evOpts
	}
	return sstable.NewWriter(objstorageprovider.NewFileWritable(f), opts), path
}

// run mirrors Writer.run/commitBatch: batches of at most MaxBatchRows rows
// or MaxBatchBytes bytes, built by the writer's own code.
func (ig *bulkIngester) run(units []*Unit) {
	w := ig.w
	// A group smaller than a batch (G below ~1.5 MiB, the compressed size
	// of 16,384 rows) is cut at batch bounds: batches of at most 3 G of
	// rows (about G compressed) then.
	maxBytes := min(w.opts.MaxBatchBytes, int(3*ig.g))
	for i := 0; i < len(units); {
		p := &pending{b: w.store.db.NewBatch()}
		for i < len(units) && p.rows < w.opts.MaxBatchRows && p.b.Len() < maxBytes {
			w.add(p, units[i])
			i++
			if ig.capt != nil && i%captureEvery == 0 {
				if err := ig.capt.commit(); err != nil {
					ig.b.Fatal(err)
				}
			}
		}
		ig.batch(p)
		p.b.Close()
		if ig.ev != nil && int64(ig.ev.EstimatedSize()) >= ig.g {
			ig.ingest()
		}
	}
	ig.ingest()
}

// batch is commitBatch up to the commit, then routes the batch's entries.
func (ig *bulkIngester) batch(p *pending) {
	w := ig.w
	if err := w.flushKeyed(p); err != nil {
		ig.b.Fatal(err)
	}
	if err := w.writeIndex(p); err != nil {
		ig.b.Fatal(err)
	}
	if p.counts {
		v, err := EncodeCounts(w.counts)
		if err != nil {
			ig.b.Fatal(err)
		}
		_ = p.b.Set(KeyCounts, v, nil)
	}
	for _, r := range p.receipts {
		if r.Refused != nil {
			ig.b.Fatal(r.Refused)
		}
	}
	r := p.b.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			ig.b.Fatal(err)
		}
		if !ok {
			break
		}
		if hasPrefix(k, PrefixEvent) {
			if ig.ev == nil {
				ig.ev, ig.evPath = ig.newFile("ev")
			}
			if err := ig.ev.Set(k, v); err != nil {
				ig.b.Fatal(err)
			}
			ig.evRows++
			continue
		}
		e := stateKV{k0: len(ig.arena), order: len(ig.state), del: kind == pebble.InternalKeyKindDelete}
		ig.arena = append(ig.arena, k...)
		e.k1 = len(ig.arena)
		ig.arena = append(ig.arena, v...)
		e.v1 = len(ig.arena)
		ig.state = append(ig.state, e)
	}
	// What commitBatch does once a batch is durable; the caches are what
	// lets the next batches of the group see this one's state before it is
	// ingested (a bootstrap reads no rev/ or repo/ from the store).
	w.durableStates()
	ig.events = append(ig.events, p.events...)
}

// ingest writes the group's state file(s), finishes its ev/ file and
// ingests them in one DB.Ingest, then publishes the group's events.
func (ig *bulkIngester) ingest() {
	if ig.ev == nil && len(ig.state) == 0 {
		return
	}
	type file struct {
		kind string
		path string
		size int64
	}
	var files []file
	if ig.ev != nil {
		if err := ig.ev.Close(); err != nil { // Finish syncs the file
			ig.b.Fatal(err)
		}
		files = append(files, file{kind: "ev", path: ig.evPath})
		ig.ev = nil
	}
	ig.maxGroupRows = max(ig.maxGroupRows, ig.evRows)
	ig.evRows = 0
	key := func(e stateKV) []byte { return ig.arena[e.k0:e.k1] }
	sort.SliceStable(ig.state, func(i, j int) bool { return string(key(ig.state[i])) < string(key(ig.state[j])) })
	var st *sstable.Writer
	var stPath, stKind string
	closeState := func() {
		if st == nil {
			return
		}
		if err := st.Close(); err != nil {
			ig.b.Fatal(err)
		}
		files = append(files, file{kind: stKind, path: stPath})
		st = nil
	}
	for i, e := range ig.state {
		if i+1 < len(ig.state) && string(key(ig.state[i+1])) == string(key(e)) {
			continue // a later write of the same key wins
		}
		kind := "state"
		if ig.split {
			kind = "state-hi"
			if string(key(e)) < string(PrefixEvent) {
				kind = "state-lo"
			}
		}
		if st != nil && kind != stKind {
			closeState()
		}
		if st == nil {
			st, stPath = ig.newFile(kind)
			stKind = kind
		}
		var err error
		if e.del {
			err = st.Delete(key(e))
		} else {
			err = st.Set(key(e), ig.arena[e.k1:e.v1])
		}
		if err != nil {
			ig.b.Fatal(err)
		}
	}
	closeState()
	ig.state, ig.arena = ig.state[:0], ig.arena[:0]

	paths := make([]string, len(files))
	for i := range files {
		info, err := os.Stat(files[i].path)
		if err != nil {
			ig.b.Fatal(err)
		}
		files[i].size = info.Size()
		paths[i] = files[i].path
		if files[i].kind == "ev" {
			ig.evFiles++
			ig.evBytes += files[i].size
		} else {
			ig.stateFiles++
			ig.stateBytes += files[i].size
		}
	}
	db := ig.s.DB()
	m0 := db.Metrics()
	if ig.split {
		if err := db.Ingest(paths); err != nil {
			ig.b.Fatal(err)
		}
		ig.ingests++
	} else {
		// One DB.Ingest refuses files whose bounds overlap ("local
		// ingestion sstables have overlapping ranges", ingest.go:506),
		// and a state file spanning ev/ overlaps the ev/ file's: two
		// ingests, the state file first (not atomic).
		slices.SortFunc(paths, func(a, b string) int { return strings.Compare(filepath.Base(b)[7:], filepath.Base(a)[7:]) }) // state before ev
		for _, p := range paths {
			if err := db.Ingest([]string{p}); err != nil {
				ig.b.Fatal(err)
			}
			ig.ingests++
		}
	}
	m1 := db.Metrics()
	if m1.Flush.Count > m0.Flush.Count {
		ig.flushesForced++
	}
	// Where did each file land? Match the per-level deltas of ingested
	// bytes to the files' sizes.
	left := slices.Clone(files)
	for l := range m1.Levels {
		n := int(m1.Levels[l].TablesIngested - m0.Levels[l].TablesIngested)
		bytes := int64(m1.Levels[l].BytesIngested - m0.Levels[l].BytesIngested)
		if n == 0 {
			continue
		}
		idx := matchSizes(left, n, bytes, func(f file) int64 { return f.size })
		if idx == nil {
			ig.unmatched += n
			continue
		}
		for _, i := range idx {
			if ig.landed[left[i].kind] == nil {
				ig.landed[left[i].kind] = map[int]int{}
			}
			ig.landed[left[i].kind][l]++
		}
		slices.Sort(idx)
		for j := len(idx) - 1; j >= 0; j-- {
			left = slices.Delete(left, idx[j], idx[j]+1)
		}
	}
	ig.w.live.publish(ig.events)
	ig.events = ig.events[:0]
	if ig.rangeCompact && ig.ingests%8 == 0 {
		if err := db.Compact([]byte{0}, PrefixEvent, false); err != nil {
			ig.b.Fatal(err)
		}
		if err := db.Compact(prefixEnd(PrefixEvent), []byte{0xff, 0xff}, false); err != nil {
			ig.b.Fatal(err)
		}
		ig.rangeCompactions++
	}
}

// matchSizes finds n of files whose sizes add up to total.
func matchSizes[F any](files []F, n int, total int64, size func(F) int64) []int {
	var pick func(start, n int, total int64) []int
	pick = func(start, n int, total int64) []int {
		if n == 0 {
			if total == 0 {
				return []int{}
			}
			return nil
		}
		for i := start; i < len(files); i++ {
			if r := pick(i+1, n-1, total-size(files[i])); r != nil {
				return append(r, i)
			}
		}
		return nil
	}
	return pick(0, n, total)
}

func (ig *bulkIngester) summary() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "  ingest: %d ingests, %d ev/ files (%d B, %.1f files/GiB, at most %d rows a group), %d state files (%d B); flush during %d ingests",
		ig.ingests, ig.evFiles, ig.evBytes, float64(ig.evFiles)/(float64(ig.evBytes)/(1<<30)), ig.maxGroupRows,
		ig.stateFiles, ig.stateBytes, ig.flushesForced)
	if ig.capt != nil {
		fmt.Fprintf(&sb, "; %d capture commits", ig.capt.commits)
	}
	if ig.rangeCompact {
		fmt.Fprintf(&sb, "; %d range-restricted manual compaction pairs", ig.rangeCompactions)
	}
	sb.WriteString("\n  landed:")
	for _, kind := range slices.Sorted(maps.Keys(ig.landed)) {
		fmt.Fprintf(&sb, " %s", kind)
		for _, l := range slices.Sorted(maps.Keys(ig.landed[kind])) {
			fmt.Fprintf(&sb, " L%d×%d", l, ig.landed[kind][l])
		}
		sb.WriteString(";")
	}
	if ig.unmatched > 0 {
		fmt.Fprintf(&sb, " (%d files not matched to a level)", ig.unmatched)
	}
	sb.WriteString("\n")
	return sb.String()
}
