package archive

import (
	"context"
	"testing"

	"github.com/backstream/backstream/oracle/world"
)

// BenchmarkWriterWorldRecords writes the simulated network's real record mix
// (posts with facets and embeds, likes, follows, profiles, ...; ~216-byte
// CBOR on average) as backfill rows, one unit per repo chunk, then compacts
// and reports the bytes on disk per archived record, everything included
// (keys, event envelope, CIDs, rev/ and repo/ keys are not written here).
func BenchmarkWriterWorldRecords(b *testing.B) {
	w0, err := world.Build(world.Config{Seed: 3, Accounts: 2000, RecordsMean: 50, Hosts: 4})
	if err != nil {
		b.Fatal(err)
	}
	var units []*Unit
	records, recBytes := 0, 0
	for _, acc := range w0.Accounts() {
		var evs []Event
		for path, c := range w0.Records(acc.DID) {
			rec, _ := w0.RecordBytes(acc.DID, path)
			i := 0
			for i < len(path) && path[i] != '/' {
				i++
			}
			evs = append(evs, Event{Kind: KindCreate, DID: acc.DID, Collection: path[:i], RKey: path[i+1:], Rev: acc.Rev, CID: c.Bytes(), Record: rec, Source: SourceBackfill})
			records++
			recBytes += len(rec)
			if len(evs) == 1024 {
				units = append(units, &Unit{Events: evs})
				evs = nil
			}
		}
		if len(evs) > 0 {
			units = append(units, &Unit{Events: evs})
		}
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		dir := b.TempDir()
		s, err := Open(dir, testOptions(nil))
		if err != nil {
			b.Fatal(err)
		}
		w, _ := NewWriter(s, WriterOptions{Logger: quietLogger, LiveLogBytes: 1 << 20})
		acks := NewAcks()
		for _, u := range units {
			c := *u
			c.Events = append([]Event(nil), u.Events...)
			c.Acks = acks
			if err := w.Submit(context.Background(), &c); err != nil {
				b.Fatal(err)
			}
			acks.Drain(nil)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := s.DB().Compact([]byte{0}, []byte{0xff}, true); err != nil {
			b.Fatal(err)
		}
		var size int64
		for _, l := range s.DB().Metrics().Levels {
			size += l.Size
		}
		b.ReportMetric(float64(size)/float64(records), "disk-B/record")
		b.ReportMetric(float64(recBytes)/float64(records), "cbor-B/record")
		b.ReportMetric(float64(records), "records")
		s.Close()
	}
}
