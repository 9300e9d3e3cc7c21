package backfill

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/backstream/backstream/upstream"
	"github.com/ipfs/go-cid"
	"github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"
	"github.com/multiformats/go-multihash"
)

// writePaddedCAR writes a valid repository CAR of 50 records followed by n
// unreferenced raw blocks of pad bytes each, streamed (nothing of the size
// of the CAR is held in memory). It returns the DID and the size.
func writePaddedCAR(t testing.TB, path string, n, pad int) (string, int64) {
	return writeBenchCAR(t, path, 50, n, pad)
}

// writeBenchCAR is writePaddedCAR with posts records.
func writeBenchCAR(t testing.TB, path string, posts, n, pad int) (string, int64) {
	f := benchFixture(t, posts)
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(fh, 1<<20)
	if err := car.WriteHeader(&car.CarHeader{Roots: []cid.Cid{f.commitBlk.c}, Version: 1}, w); err != nil {
		t.Fatal(err)
	}
	for _, b := range f.blocks() {
		if err := carutil.LdWrite(w, b.c.Bytes(), b.data); err != nil {
			t.Fatal(err)
		}
	}
	data := make([]byte, max(pad, 8))
	for i := range n {
		binary.BigEndian.PutUint64(data, uint64(i))
		sum := sha256.Sum256(data)
		mh, _ := multihash.Encode(sum[:], multihash.SHA2_256)
		c := cid.NewCidV1(cid.Raw, mh)
		if err := carutil.LdWrite(w, c.Bytes(), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, err := fh.Stat()
	if err != nil {
		t.Fatal(err)
	}
	fh.Close()
	return f.did, fi.Size()
}

// fileSource serves one CAR file as every getRepo: a fresh hard link each
// time, since the job removes what it is given.
type fileSource struct {
	upstream.RepoSource
	path string
	n    atomic.Int64
}

func (s *fileSource) GetRepo(_ context.Context, did string) (*upstream.Download, error) {
	p := s.path + ".dl" + itoa(int(s.n.Add(1)))
	if err := os.Link(s.path, p); err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	return &upstream.Download{DID: did, Path: p, Size: fi.Size()}, nil
}

func itoa(n int) string {
	b := []byte{}
	for n > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// nopWriter satisfies Writer for attempts that never submit.
type nopWriter struct{ Writer }

// BenchmarkJobPrepare: one attempt's preparation of a spilled CAR (memory
// admission, reading or indexing the scratch file, verification) plus one
// pass over its records, for an ordinary repository (2,000 records) and a
// padded one (the same with 20,000 extra 200-byte blocks); the ordinary
// one again with a budget that sends it through VerifyFile.
func BenchmarkJobPrepare(b *testing.B) {
	for _, tc := range []struct {
		name       string
		posts, pad int
		budget     int64
	}{
		{"records=2000", 2000, 0, 1 << 30},
		{"records=50,blocks=20000", 50, 20000, 1 << 30},
		{"records=2000,from-file", 2000, 0, 256 << 10}, // under the CAR: verified from its file
	} {
		b.Run(tc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "repo.car")
			did, size := writeBenchCAR(b, path, tc.posts, tc.pad, 200)
			src := &fileSource{path: path}
			r, err := NewRunner(Options{Source: src, Writer: nopWriter{}, Memory: NewMemory(tc.budget, nil)})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				p, err := r.attempt(context.Background(), did, "")
				if err != nil {
					b.Fatal(err)
				}
				if err := p.snap.Records(func(Record) error { return nil }); err != nil {
					b.Fatal(err)
				}
				p.release()
			}
		})
	}
}
