package archive

// pebble_metrics.go exports Pebble's health at scrape time (no polling
// goroutine): disk usage, compaction debt, L0 shape, read amplification, WAL.

import "github.com/prometheus/client_golang/prometheus"

// PebbleCollector is a prometheus.Collector over the store's db.Metrics().
type PebbleCollector struct {
	s                                              *Store
	disk, debt, l0Files, l0Sublevels, readAmp, wal *prometheus.Desc
	compactions, flushes                           *prometheus.Desc
	bgErrors, faults                               *prometheus.Desc
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
		bgErrors: prometheus.NewDesc("backstream_store_background_errors_total",
			"Pebble background errors (failed flushes, compactions) by kind: enospc, eio, emfile, other.", []string{"kind"}, nil),
		faults: prometheus.NewDesc("backstream_store_disk_faults_total",
			"Disk faults that stop the process, by cause: write_stall, failed_flushes, min_free.", []string{"cause"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *PebbleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.disk, c.debt, c.l0Files, c.l0Sublevels, c.readAmp, c.wal, c.compactions, c.flushes, c.bgErrors, c.faults} {
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
}

// collectDisk exports the disk guard's counters (diskguard.go).
func (c *PebbleCollector) collectDisk(ch chan<- prometheus.Metric) {
	for i, k := range errorKinds {
		ch <- prometheus.MustNewConstMetric(c.bgErrors, prometheus.CounterValue, float64(c.s.disk.errs[i].Load()), k)
	}
	for i, cause := range faultCauses {
		ch <- prometheus.MustNewConstMetric(c.faults, prometheus.CounterValue, float64(c.s.disk.faults[i].Load()), cause)
	}
}
