package ident

import (
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/identity"
)

// The stored form of a document's key parses back to the same key: a
// Multikey is kept as the document wrote it, a legacy key type (whose
// string ParsePublicMultibase does not read) in the Multikey form.
func TestStoredKeyParsesBack(t *testing.T) {
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := priv.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	for name, vm := range map[string]identity.VerificationMethod{
		"multikey": {Type: "Multikey", PublicKeyMultibase: pub.Multibase()},
		"legacy":   {Type: "EcdsaSecp256k1VerificationKey2019", PublicKeyMultibase: "z-uncompressed-point"},
	} {
		id := &identity.Identity{Keys: map[string]identity.VerificationMethod{"atproto": vm}}
		got := storedKey(id, pub)
		if vm.Type == "Multikey" && got != vm.PublicKeyMultibase {
			t.Fatalf("%s: stored %q, want the document's %q", name, got, vm.PublicKeyMultibase)
		}
		back, err := atcrypto.ParsePublicMultibase(got)
		if err != nil || !back.Equal(pub) {
			t.Fatalf("%s: stored %q parses to %v, %v; want the document's key", name, got, back, err)
		}
	}
}
