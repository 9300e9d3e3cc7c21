package firehose

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzCheckCommitMessage: no blocks panic checkCommitMessage (called
// without the guarded belt, so a real panic is found), and whatever it
// accepts names the message's DID and rev. Seeds: real single-op #commit
// blocks of the simulated network, truncated and with a flipped byte. Run
// with: go test ./firehose -fuzz FuzzCheckCommitMessage
func FuzzCheckCommitMessage(f *testing.F) {
	w := buildWorld(f, 4)
	dids := activeDIDs(w)
	ev := must(f)(w.CreateRecord(dids[0], "app.bsky.feed.post", "", map[string]any{
		"$type": "app.bsky.feed.post", "text": "fuzz seed", "createdAt": "2024-01-01T00:00:00Z"}))
	msg := *ev.Commit
	b := []byte(msg.Blocks)
	f.Add(b)
	f.Add(b[:len(b)/2])
	flipped := bytes.Clone(b)
	flipped[len(flipped)-3] ^= 0x40
	f.Add(flipped)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, blocks []byte) {
		m := msg
		m.Blocks = blocks
		s, err := checkCommitMessage(&m)
		if err != nil {
			if !errors.Is(err, errNotInverting) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if c := s.commit; c.DID != m.Repo || c.Rev != m.Rev {
			t.Fatalf("accepted a commit of %s rev %s for %s rev %s", c.DID, c.Rev, m.Repo, m.Rev)
		}
	})
}
