// Package loglimit owns the two helpers every bounded log line shares.
//
// Every is the "one line per key per interval" rate limit of a log line
// that a limit tripping, a refusal or a background error would otherwise
// write once per event: Tick counts each occurrence of a key and says when
// a line is due — the key's first occurrence, or the interval passed since
// its last line — and how many occurrences that line stands for; Log is
// Tick and the line, written with the occurrences and the interval
// (`occurrences`, `per`) so that every bounded line reads alike. It runs
// on the caller's clock (an injectable now), is safe for concurrent use,
// and keeps one small entry per key for its lifetime: every caller's keys
// are a closed set (limit names, refusal reasons, error kinds), never a
// client's address or anything a client chooses.
//
// Clip cuts client-influenced text (an error message, a close reason, a
// query parameter) to a byte bound on a rune boundary before it goes into
// a log line, marking how many bytes it dropped.
package loglimit
