package ident

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// plainLines are export lines as plc.directory writes them: a
// plc_operation, a legacy create, a tombstone, a nullified op.
var plainLines = []string{
	`{"did":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","operation":{"sig":"lza4-X0fWE_tYXrJ7M6NpfGZ6WVNVhTi0dL8E9wDgs9_0Xf4HZvVYCmDtsXDbHl2m0v4TxbQy-lEvOJdgROPQw",` +
		`"prev":null,"type":"plc_operation","services":{"atproto_pds":{"type":"AtprotoPersonalDataServer","endpoint":"https://bsky.social"}},` +
		`"alsoKnownAs":["at://atproto.com"],"rotationKeys":["did:key:zQ3shhCGUqDKjStzuDxPkTxN6ujddP4RkEKJJouJGRRkaLGbg","did:key:zQ3shpKnbdPx3g3CmPf5cRVTPe1HtSwVn5ish3wSnDPQCbLJK"],` +
		`"verificationMethods":{"atproto":"did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"}},` +
		`"cid":"bafyreigp6shzy6dlcxuowwoxz7u5nemdrkad2my5zwzpwilcnhih7bw6zm","nullified":false,"createdAt":"2023-04-12T04:53:57.057Z"}`,
	`{"did":"did:plc:yk4dd2qkboz2yv6tpubpc6co","operation":{"sig":"9NuYV7AqwHVTc0YuWzNV3CJafsSZWH7qCxHRUIP2xWlB-YexXC1OaYAnUayiCXLVzRQ8WBXIqF-SvZdNalwcjA",` +
		`"prev":null,"type":"create","handle":"dan.bsky.social","service":"https://bsky.social",` +
		`"signingKey":"did:key:zQ3shP5TBe1sQfSttXty15FAEHV1DZgcxRZNxvEWnPfLFwLxJ","recoveryKey":"did:key:zQ3shhCGUqDKjStzuDxPkTxN6ujddP4RkEKJJouJGRRkaLGbg"},` +
		`"cid":"bafyreigcxay6ucqlwowfpu35ivfhebfqwbrtixfc2lxndr2uerq7xfxj2q","nullified":false,"createdAt":"2022-11-17T01:07:13.996Z"}`,
	`{"did":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","operation":{"sig":"x","prev":"bafyreigp6shzy6dlcxuowwoxz7u5nemdrkad2my5zwzpwilcnhih7bw6zm","type":"plc_tombstone"},` +
		`"cid":"bafyreib","nullified":false,"createdAt":"2024-01-01T00:00:00.000Z"}`,
	`{"did":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","operation":{"type":"plc_operation","verificationMethods":{},"services":{},"alsoKnownAs":[]},"cid":"b","nullified":true,"createdAt":"2024-01-01T00:00:00.001Z"}`,
}

// lineCases are the plain lines and every way out of their shape.
func lineCases() []string {
	r := strings.NewReplacer
	cases := []string{``, `{}`, `[]`, `null`, `{"did":null}`, `{"did":5}`, `{"nullified":null}`, `{"nullified":1}`,
		`{"nullified":tru}`, `{"nullified":truex}`, `{"operation":null}`, `{"operation":[]}`, `{"operation":{"prev":nul}}`,
		`{"operation":{"verificationMethods":null}}`, `{"operation":{"verificationMethods":{"a":"b","a":"c"}}}`,
		`{"operation":{"services":{"a":{},"a":{"type":"x"}}}}`, `{"operation":{"services":{"a":"x"}}}`,
		`{"operation":{"services":{"a":{"type":"t","endpoint":"e","extra":["x"]}}}}`,
		`{"operation":{"services":{"a":{"Endpoint":"e"}}}}`, `{"operation":{"verificationMethods":{"a":null}}}`,
		`{"did":"a"}{}`, `{"did":"a"} `, `{"did":"a",}`, "<html></html>", `{"did":42,"operation":[],"cid":7,"nullified":"no","createdAt":false}`}
	variants := []*strings.Replacer{
		r(`"did":`, `"DID":`), r(`"did":`, `"Did":`), r(`"operation":`, `"Operation":`), r(`"nullified":`, `"NULLIFIED":`),
		r(`"createdAt":`, `"createdat":`), r(`"type":`, `"Type":`), r(`"alsoKnownAs":`, `"alsoknownas":`),
		r(`"services":`, `"Services":`), r(`"endpoint":`, `"ENDPOINT":`), r(`"handle":`, `"Handle":`),
		r(`"signingKey":`, `"signingkey":`), r(`"verificationMethods":`, `"verificationmethods":`),
		r(`"did":`, `"did":"x","did":`), r(`"type":`, `"type":"x","type":`), r(`"nullified":false`, `"nullified":false,"nullified":true`),
		r(`"prev":null`, `"prev":1`), r(`"prev":null`, `"prev":{"a":"b"}`), r(`"prev":null`, `"prev":true`),
		r(`"cid":`, `"cid":null,"x":`), r(`"cid":`, `"extra":[null],"cid":`),
		r(`bsky.social`, `bsky\u002esocial`), r(`bsky.social`, "bsky\u00e9social"), r(`bsky.social`, "bsky\xffsocial"),
		r(`,`, ` , `), r(`:`, " :\n"), r(`{`, "{ "), r(`}`, " }"), r(`false`, ` false `), r(`null`, " null\t"),
		r(`"alsoKnownAs":[`, `"alsoKnownAs":[5,`), r(`"rotationKeys":[`, `"rotationKeys":[[],`),
		r(`"atproto":`, `"Atproto":`), r(`"atproto_pds":`, `"ATPROTO_PDS":`),
	}
	for _, l := range plainLines {
		cases = append(cases, l, " \t"+l+" ")
		for _, v := range variants {
			cases = append(cases, v.Replace(l))
		}
		for i := 0; i < len(l); i += 41 {
			cases = append(cases, l[:i])
		}
	}
	return cases
}

// checkLine fails unless decodeExportLine gives encoding/json's verdict
// and line (reflect.DeepEqual: nil and empty maps and slices apart); it
// reports whether the scanner took b.
func checkLine(t *testing.T, b []byte) (plain bool) {
	t.Helper()
	var want exportLine
	wantErr := json.Unmarshal(b, &want)
	got, err := decodeExportLine(b)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: decodeExportLine error %v, encoding/json %v", b, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decodeExportLine\n %+v\nencoding/json\n %+v", b, got, want)
	}
	_, plain = scanExportLine(b)
	return plain
}

// The scanner reads the plain lines itself and agrees with encoding/json on
// every case (taken by the scanner or left to encoding/json).
func TestDecodeExportLineMatchesEncodingJSON(t *testing.T) {
	for _, l := range plainLines {
		if !checkLine(t, []byte(l)) {
			t.Fatalf("the scanner did not take a plain line: %s", l)
		}
	}
	for _, c := range lineCases() {
		checkLine(t, []byte(c))
	}
}

func FuzzDecodeExportLine(f *testing.F) {
	for _, c := range lineCases() {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkLine(t, b) })
}
