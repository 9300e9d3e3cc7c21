// Command natsfold is an example consumer of backstream's NATS stream: a
// durable pull consumer that folds the stream per account into the records
// it holds (collection/rkey → CID), like a check of the archive does, and
// prints what it holds once it has caught up. Run it again with the same
// --durable and it resumes where it stopped (the fold itself is in memory:
// a real consumer keeps its state and the stream position together).
//
//	go run ./examples/natsfold --url nats://localhost:4222
//	go run ./examples/natsfold --filter 'backstream.commit.app.bsky.feed.>'
//
// See docs/nats.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Event is the part of backstream's /subscribe JSON the fold reads.
type Event struct {
	DID    string `json:"did"`
	Cursor uint64 `json:"cursor"`
	Kind   string `json:"kind"`
	Commit *struct {
		Operation  string `json:"operation"`
		Collection string `json:"collection"`
		RKey       string `json:"rkey"`
		CID        string `json:"cid"`
	} `json:"commit"`
	Account *struct {
		Status string `json:"status"`
	} `json:"account"`
}

// Fold is per DID, collection/rkey → CID.
type Fold map[string]map[string]string

// Apply folds one event: a create or update sets a record, a delete removes
// it, an account deleted or taken down clears the account (its content is no
// longer redistributed). A sync changes nothing: backstream archives a
// whole-repo replacement as the creates, updates and deletes that bring the
// account to its new snapshot, and those follow it.
func (f Fold) Apply(ev *Event) {
	recs := f[ev.DID]
	if recs == nil {
		recs = map[string]string{}
		f[ev.DID] = recs
	}
	switch {
	case ev.Kind == "commit" && ev.Commit != nil:
		path := ev.Commit.Collection + "/" + ev.Commit.RKey
		if ev.Commit.Operation == "delete" {
			delete(recs, path)
		} else {
			recs[path] = ev.Commit.CID
		}
	case ev.Kind == "account" && ev.Account != nil && (ev.Account.Status == "deleted" || ev.Account.Status == "takendown"):
		clear(recs)
	}
}

// Position is where a consumer is: the stream sequence and the archive
// seq (Nats-Msg-Id, also the body's "cursor") of the last message folded.
// A /subscribe client resumes the same events with cursor=Seq+1.
type Position struct {
	StreamSeq uint64
	Seq       uint64
}

// Run folds the stream through the durable consumer until it has caught
// up (no message pending), or ctx ends.
func Run(ctx context.Context, js jetstream.JetStream, stream, durable, filter string, f Fold) (Position, error) {
	cfg := jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: filter}
	c, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return Position{}, fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
	}
	var pos Position
	for {
		// FetchNoWait takes what is there now and leaves no pull request
		// behind on the server that would swallow later messages.
		batch, err := c.FetchNoWait(1000)
		if err != nil {
			return pos, err
		}
		n, pending := 0, uint64(0)
		for m := range batch.Messages() {
			var ev Event
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				return pos, fmt.Errorf("message %s: %w", m.Headers().Get(nats.MsgIdHdr), err)
			}
			f.Apply(&ev)
			md, err := m.Metadata()
			if err != nil {
				return pos, err
			}
			seq, _ := strconv.ParseUint(m.Headers().Get(nats.MsgIdHdr), 10, 64)
			pos, pending = Position{StreamSeq: md.Sequence.Stream, Seq: seq}, md.NumPending
			// Ack after the fold: a crash before it delivers the message
			// again, so the fold must be idempotent (this one is).
			if err := m.Ack(); err != nil {
				return pos, err
			}
			n++
		}
		if err := batch.Error(); err != nil {
			return pos, err
		}
		if n == 0 || pending == 0 {
			return pos, nil
		}
		if ctx.Err() != nil {
			return pos, ctx.Err()
		}
	}
}

func main() {
	url := flag.String("url", nats.DefaultURL, "NATS servers, comma-separated")
	stream := flag.String("stream", "backstream", "the stream backstream publishes to (serve --nats-stream)")
	durable := flag.String("durable", "natsfold", "durable consumer name (resume point)")
	filter := flag.String("filter", "", "subject filter, e.g. backstream.commit.app.bsky.feed.> (empty: everything)")
	creds := flag.String("creds", "", "NATS credentials file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var opts []nats.Option
	if *creds != "" {
		opts = append(opts, nats.UserCredentials(*creds))
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsfold:", err)
		os.Exit(1)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsfold:", err)
		os.Exit(1)
	}
	f := Fold{}
	pos, err := Run(ctx, js, *stream, *durable, *filter, f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsfold:", err)
		os.Exit(1)
	}
	records := 0
	for _, recs := range f {
		records += len(recs)
	}
	fmt.Printf("folded up to stream sequence %d (archive seq %d; /subscribe?cursor=%d resumes after it): %d accounts, %d records\n",
		pos.StreamSeq, pos.Seq, pos.Seq+1, len(f), records)
}
