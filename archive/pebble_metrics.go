package archive

// pebble_metrics.go exports Pebble's health at scrape time (no polling
// goroutine): disk usage, compaction debt, L0 shape, read amplification, WAL,
// and the bytes the store writes for the bytes committed to it (its write
// amplification).

import (
	"github.com/cockroachdb/pebble"
	"github.com/prometheus/client_golang/prometheus"
)

// PebbleCollector is a prometheus.Collector over the store's db.Metrics().
type PebbleCollector struct {
	s                                              *Store
	disk, debt, l0Files, l0Sublevels, readAmp, wal *prometheus.Desc
	compactions, flushes                           *prometheus.Desc
	walIn, written                                 *prometheus.Desc
	bgErrors, faults, slowReads                    *prometheus.Desc
	free, minFree                                  *prometheus.Desc
}

// NewPebbleCollector returns a collector for s; register it on the process
// registry. It reads nothing until scraped.
func NewPebbleCollector(s *Store) *PebbleCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("backstream_pebble_"+name, help, nil, nil)
	}
	return &PebbleCollector{
		s:           s,
		disk:        d("disk_usage_bytes", "Bytes the store uses on disk (sstables, WAL, manifests)."),
		debt:        d("compaction_debt_bytes", "Estimated bytes compactions must rewrite to reach a stable shape."),
		l0Files:     d("l0_files", "Sstables in level 0."),
		l0Sublevels: d("l0_sublevels", "Level-0 sublevels (write stalls grow with them)."),
		readAmp:     d("read_amplification", "Sstables a point read may consult."),
		wal:         d("wal_bytes", "Live WAL bytes."),
		compactions: d("compactions_total", "Compactions since the store was opened."),
		flushes:     d("flushes_total", "Memtable flushes since the store was opened."),
		walIn:       d("wal_in_bytes_total", "Bytes committed to the store (batches as the WAL receives them) since it was opened."),
		written: prometheus.NewDesc("backstream_pebble_written_bytes_total",
			"Bytes the store wrote since it was opened, by what wrote them: wal, flush, compaction, ingest. Their sum over backstream_pebble_wal_in_bytes_total is the write amplification.",
			[]string{"by"}, nil),
		bgErrors: prometheus.NewDesc("backstream_store_background_errors_total",
			"Pebble background errors (failed flushes, compactions) by kind: enospc, eio, emfile, other.", []string{"kind"}, nil),
		faults: prometheus.NewDesc("backstream_store_disk_faults_total",
			"Disk faults that stop the process, by cause: write_stall, read_stall, failed_flushes, min_free.", []string{"cause"}, nil),
		free: prometheus.NewDesc("backstream_store_free_bytes",
			"Free bytes of the data dir's volume at the last free-space check (every 5 s in serve); absent when the floor is off.", nil, nil),
		minFree: prometheus.NewDesc("backstream_store_min_free_bytes",
			"The free-space floor of the data dir's volume (--min-free): below it ingest stops and the process exits; absent when the floor is off.", nil, nil),
		slowReads: prometheus.NewDesc("backstream_store_slow_reads_total",
			"Reads of the store's files (and opens, stats, listings of them) found still out over a third of --max-write-stall: every one out over two thirds of it, some over a third; a read_stall fault at the whole bound.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *PebbleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.disk, c.debt, c.l0Files, c.l0Sublevels, c.readAmp, c.wal, c.compactions, c.flushes, c.walIn, c.written, c.bgErrors, c.faults, c.slowReads, c.free, c.minFree} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PebbleCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s == nil || c.s.db == nil {
		return
	}
	c.collectDisk(ch)
	m := c.s.db.Metrics()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	g(c.disk, float64(m.DiskSpaceUsage()))
	g(c.debt, float64(m.Compact.EstimatedDebt))
	g(c.l0Files, float64(m.Levels[0].NumFiles))
	g(c.l0Sublevels, float64(m.Levels[0].Sublevels))
	g(c.readAmp, float64(m.ReadAmp()))
	g(c.wal, float64(m.WAL.Size))
	ch <- prometheus.MustNewConstMetric(c.compactions, prometheus.CounterValue, float64(m.Compact.Count))
	ch <- prometheus.MustNewConstMetric(c.flushes, prometheus.CounterValue, float64(m.Flush.Count))
	c.collectWritten(ch, m)
}

// collectWritten exports the bytes committed and the bytes written for
// them, since the store was opened. A move compaction writes nothing.
func (c *PebbleCollector) collectWritten(ch chan<- prometheus.Metric, m *pebble.Metrics) {
	var flushed, compacted, ingested uint64
	for _, l := range m.Levels {
		flushed += l.BytesFlushed
		compacted += l.BytesCompacted
		ingested += l.BytesIngested
	}
	ch <- prometheus.MustNewConstMetric(c.walIn, prometheus.CounterValue, float64(m.WAL.BytesIn))
	for _, w := range []struct {
		by string
		n  uint64
	}{{"wal", m.WAL.BytesWritten}, {"flush", flushed}, {"compaction", compacted}, {"ingest", ingested}} {
		ch <- prometheus.MustNewConstMetric(c.written, prometheus.CounterValue, float64(w.n), w.by)
	}
}

// collectDisk exports the disk guard's counters (diskguard.go).
func (c *PebbleCollector) collectDisk(ch chan<- prometheus.Metric) {
	for i, k := range errorKinds {
		ch <- prometheus.MustNewConstMetric(c.bgErrors, prometheus.CounterValue, float64(c.s.disk.errs[i].Load()), k)
	}
	for i, cause := range faultCauses {
		ch <- prometheus.MustNewConstMetric(c.faults, prometheus.CounterValue, float64(c.s.disk.faults[i].Load()), cause)
	}
	ch <- prometheus.MustNewConstMetric(c.slowReads, prometheus.CounterValue, float64(c.s.disk.slowReads.Load()))
	if sp, ok := c.s.FreeSpace(); ok {
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(sp.Free))
		ch <- prometheus.MustNewConstMetric(c.minFree, prometheus.GaugeValue, float64(sp.Floor))
	}
}
