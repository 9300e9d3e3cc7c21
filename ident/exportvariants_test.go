package ident_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/backstream/backstream/ident"
)

// TestReadExportVariants: ops of the export in the forms the directory
// holds, each loaded as the identity GET /<did> gives, so that a lookup
// needs no request and the account's commits verify: an atproto key of
// either curve; a legacy create (its signingKey, a handle without at://,
// a service without a scheme); an op with another verification method
// whose value is not a did:key (written before the directory checked
// them; GET /<did> renders it as a Multikey of the bare value, and the
// atproto key is still the account's); an atproto key written as a bare
// multibase (GET /<did> renders it as it is, and it parses).
func TestReadExportVariants(t *testing.T) {
	k256, p256 := newVariantKey(t, false), newVariantKey(t, true)
	const at = "2024-01-01T00:00:00.001Z"
	type account struct {
		name, did string
		key       variantKey
		line      string
	}
	accounts := []account{
		{name: "K-256", did: stubDIDA, key: k256, line: exportOp(stubDIDA, k256.pub.DIDKey(), at)},
		{name: "P-256", did: stubDIDB, key: p256, line: exportOp(stubDIDB, p256.pub.DIDKey(), at)},
		{name: "legacy create", did: "did:plc:cccccccccccccccccccccccc", key: k256, line: fmt.Sprintf(`{"did":"did:plc:cccccccccccccccccccccccc",`+
			`"operation":{"sig":"x","prev":null,"type":"create","handle":"alice.test","service":"pds.test","signingKey":%q,"recoveryKey":%q},`+
			`"cid":"bafyreia","nullified":false,"createdAt":%q}`, k256.pub.DIDKey(), k256.pub.DIDKey(), at)},
		{name: "a verification method not a did:key", did: "did:plc:dddddddddddddddddddddddd", key: p256, line: fmt.Sprintf(`{"did":"did:plc:dddddddddddddddddddddddd",`+
			`"operation":{"type":"plc_operation","verificationMethods":{"atproto":%q,"other":%q},"alsoKnownAs":["at://a.test"],`+
			`"services":{"atproto_pds":{"type":"AtprotoPersonalDataServer","endpoint":"https://pds.test"}},"rotationKeys":[],"prev":null,"sig":"x"},`+
			`"cid":"bafyreia","nullified":false,"createdAt":%q}`, p256.pub.DIDKey(), k256.pub.Multibase(), at)},
		{name: "an atproto key without did:key:", did: "did:plc:eeeeeeeeeeeeeeeeeeeeeeee", key: k256,
			line: exportOp("did:plc:eeeeeeeeeeeeeeeeeeeeeeee", k256.pub.Multibase(), at)},
	}
	x := &exportTransport{}
	for _, a := range accounts {
		x.lines = append(x.lines, a.line)
	}
	r := ident.New(ident.Config{PLC: "http://plc.test", Sleep: noSleep, HTTPClient: &http.Client{Transport: x}})
	defer r.Close()
	ctx := context.Background()
	st, err := r.ReadExport(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Loaded != int64(len(accounts)) || st.Dropped != 0 || st.Skipped != 0 {
		t.Errorf("stats %+v, want all %d loaded", st, len(accounts))
	}
	for _, a := range accounts {
		info, err := r.VerifyCommit(ctx, a.did, stubCommit(t, a.did, a.key.priv))
		if err != nil {
			t.Errorf("%s: %v", a.name, err)
			continue
		}
		if err := ident.CheckAuthority(info, "pds.test"); err != nil {
			t.Errorf("%s: %v", a.name, err)
		}
	}
	if x.others != 0 {
		t.Errorf("%d requests besides the export, want none", x.others)
	}
}
