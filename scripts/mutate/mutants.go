package main

// mutants is the catalogue. Each entry models one realistic single-edit bug
// (the failure mode it stands for is its Name) and names the focused tests
// expected to catch it. Keep the search text short but unique; when the code
// moves, update Old (the driver reports the mutant STALE), never the code.
var mutants = []Mutant{
	{
		ID: "m01", Invariant: "D3 M3",
		Name: "ratchet keeps rows at rev = the archived rev",
		File: "archive/writer.go",
		Old:  "st.keep[i] = ev.Rev > held ||",
		New:  "st.keep[i] = ev.Rev >= held ||",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestRatchet$"},
		},
	},
	{
		ID: "m02", Invariant: "R6 R5",
		Name: "listRepos checkpoint passes a page whose repos are not durably terminal",
		File: "bootstrap/watermark.go",
		Old:  "for len(w.pages) > 0 && w.pages[0].remaining == 0 {",
		New:  "for len(w.pages) > 0 && w.pages[0].remaining >= 0 {",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^(TestWatermark|TestWatermarkPartialCoverage)$"},
			{Pkg: "./bootstrap", Run: "^TestCheckpointNeverPassesNonTerminal$"},
		},
	},
	{
		ID: "m03", Invariant: "C1",
		Name: "capture cursor written in a separate unit (batch) from its rows",
		File: "firehose/gap.go",
		Old:  "\tif p == nil {\n\t\treturn c.submit(ctx, u)\n\t}\n",
		New: "\tif p == nil {\n\t\tcu := &archive.Unit{Cursor: u.Cursor}\n\t\tu.Cursor = archive.SeqCursor{}\n" +
			"\t\tif err := c.submit(ctx, cu); err != nil {\n\t\t\treturn err\n\t\t}\n" +
			"\t\treturn c.submit(ctx, u)\n\t}\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestUnitCarriesCursor$"},
		},
	},
	{
		ID: "m04", Invariant: "M1",
		Name: "bootstrap dispatches before capture's cursor is durable (wait skipped)",
		File: "lifecycle/runner.go",
		Old:  "\tt := time.NewTimer(r.cfg.CaptureWait)\n",
		New:  "\tif r.facts.CaptureReady = true; true {\n\t\treturn nil\n\t}\n\tt := time.NewTimer(r.cfg.CaptureWait)\n",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestNoGetRepoBeforeCaptureCursor$"},
		},
	},
	{
		ID: "m05", Invariant: "S9 S5",
		Name: "a replacement is applied over newer data (stale-snapshot refusal disabled)",
		File: "archive/writer.go",
		Old:  "if held > u.Replace.Rev {",
		New:  "if false && held > u.Replace.Rev {",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestReplacement$"},
			{Pkg: "./retry", Run: "^TestLiveCommitBetweenFetchAndSubmit$"},
		},
	},
	{
		ID: "m06", Invariant: "S2",
		Name: "retry ignores the per-host gate",
		File: "retry/sched.go",
		Old:  "\treturn s.hostWorkers\n",
		New:  "\treturn s.workers\n",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestHostGate$"},
		},
	},
	{
		ID: "m07", Invariant: "S1",
		Name: "reconnect resumes from the durable cursor instead of the last accepted seq",
		File: "firehose/consumer.go",
		Old:  "\tv := c.last\n",
		New:  "\tv := c.lastDurable.Load()\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestRunResumesFromLastAccepted$"},
		},
	},
	{
		ID: "m08", Invariant: "D1",
		Name: "writer commits without sync",
		File: "archive/writer.go",
		Old:  "func commitSynced(b *pebble.Batch) error { return commitWith(b, pebble.Sync) }",
		New:  "func commitSynced(b *pebble.Batch) error { return commitWith(b, pebble.NoSync) }",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestWriterPowerLoss$"},
			{Pkg: "./archive", Run: "^TestWriterReceiptMeansSynced$"},
		},
	},
	{
		ID: "m09", Invariant: "M3 M4",
		Name: "merge splits one upstream event's rows across units",
		File: "merge/walker.go",
		Old:  "cut := full && (ev.UpstreamSeq != lastUp || ev.UpstreamSeq == 0)",
		New:  "cut := full && (ev.UpstreamSeq != lastUp || true)",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestMergeKeptDroppedMatrix$"},
		},
	},
	{
		ID: "m10", Invariant: "C5",
		Name: "startup guard ignores data without identity",
		File: "archive/store.go",
		Old:  "\tif found != \"\" {\n",
		New:  "\tif false && found != \"\" {\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestGuardRefusesDataWithoutIdentity$"},
		},
	},
	// Beyond the list: storage-fault handling (item 3) and two
	// upstream families (§8.4: merge cursor off by one, delete mapped to
	// update).
	{
		ID: "m11", Invariant: "M4",
		Name: "merge resumes at cursor/merge instead of after it (a row merged twice)",
		File: "merge/walker.go",
		Old:  "it, err := cfg.Store.Captured(from + 1)",
		New:  "it, err := cfg.Store.Captured(from)",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestMergeResumes$"},
		},
	},
	{
		ID: "m12", Invariant: "C2",
		Name: "a store read error is reported as an absent key",
		File: "archive/read.go",
		Old:  "return zero, &KeyError{Key: keyString(key), Kind: ErrRead, Err: err}",
		New:  "return zero, &KeyError{Key: keyString(key), Kind: ErrNotFound}",
		Tests: []Test{
			{Pkg: "./archive", Run: "^(TestReadFaultPerKey|TestPhaseReadError)$"},
		},
	},
	{
		ID: "m13", Invariant: "S6 S3",
		Name: "a retry pass's read of the due index swallows an iterator error (the pass ends \"nothing due\")",
		File: "archive/due.go",
		Old: "\tif err := it.Error(); err != nil {\n\t\t_ = it.Close()\n\t\treturn page, nil, &KeyError{Key: \"due/<scan>\", Kind: ErrRead, Err: err}\n\t}\n" +
			"\tif err := it.Close(); err != nil {\n",
		New: "\tif err := it.Error(); false && err != nil {\n\t\t_ = it.Close()\n\t\treturn page, nil, &KeyError{Key: \"due/<scan>\", Kind: ErrRead, Err: err}\n\t}\n" +
			"\tif err := it.Close(); false && err != nil {\n",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestRetryReadFaultSweep$"},
		},
	},
	{
		ID: "m14", Invariant: "M2 M4",
		Name: "the merge walk swallows a capture read error (merging \"finishes\" early)",
		File: "merge/walker.go",
		Old:  "\tif err := it.Err(); err != nil {\n\t\treturn st, fmt.Errorf(\"merge: read capture: %w\", err)",
		New:  "\tif err := it.Err(); false && err != nil {\n\t\treturn st, fmt.Errorf(\"merge: read capture: %w\", err)",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestWalkReadFaultSweep$"},
		},
	},
	{
		ID: "m15", Invariant: "C2 S1",
		Name: "an unreadable cursor/relay is taken as absent (live consumer starts at the tip)",
		File: "lifecycle/runner.go",
		Old:  "\tc, err := r.cfg.Store.RelayCursor()\n\tif errors.Is(err, archive.ErrNotFound) {\n",
		New:  "\tc, err := r.cfg.Store.RelayCursor()\n\tif err != nil {\n",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestRunReadFaults$"},
			{Pkg: "./lifecycle", Run: "^TestRelayCursorReadFault$"},
		},
	},
	{
		ID: "m16", Invariant: "S1 D7",
		Name: "a live delete is archived as an update",
		File: "firehose/frame.go",
		Old:  "\t\tcase upstream.ActionDelete:\n\t\t\tev.Kind = archive.KindDelete\n",
		New:  "\t\tcase upstream.ActionDelete:\n\t\t\tev.Kind = archive.KindUpdate\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^(TestHandleEveryKind|TestOracleFold)$"},
		},
	},
	{
		ID: "m17", Invariant: "S3 M6",
		Name: "bootstrap's jobs lack the retry schedule (a repo failed in bootstrap waits backfill's default minutes)",
		File: "node/node.go",
		Old:  "Crash: cfg.Crash, NextAttempt: backoff.NextAttempt(),",
		New:  "Crash: cfg.Crash,",
		Tests: []Test{
			{Pkg: "./oracle/scenario", Run: "^TestBootstrapFailureRetriedOnSchedule$"},
		},
	},
	{
		ID: "m18", Invariant: "S3",
		Name: "live #sync/#account side effects do not wake the retry runner",
		File: "node/node.go",
		Old:  "OnLiveEffects:   n.retrier.Wake,",
		New:  "OnLiveEffects:   nil,",
		Tests: []Test{
			{Pkg: "./oracle/scenario", Run: "^TestSyncWakesRetry$"},
		},
	},
	{
		ID: "m19", Invariant: "H1",
		Name: "a store write stall is never bounded (a full disk hangs silently)",
		File: "archive/diskguard.go",
		Old:  "g.stall = time.AfterFunc(g.maxStall, func() { g.stallExpired(gen) })",
		New:  "g.stall = time.AfterFunc(g.maxStall, func() { _ = gen })",
		Tests: []Test{
			{Pkg: "./archive", Run: "^(TestWriteStallBound|TestShortStallIsNoFault)$"},
		},
	},
	{
		ID: "m20", Invariant: "H4 C6",
		Name: "a store past bootstrap that lost cursor/relay follows the live tip (history skipped silently)",
		File: "lifecycle/machine.go",
		Old:  "case f.HasCursor || f.Phase == archive.PhaseBootstrap:",
		New:  "case true:",
		Tests: []Test{
			{Pkg: "./lifecycle", Run: "^TestDecideRelay$"},
			{Pkg: "./node", Run: "^TestNewRefusesLostRelayPosition$"},
		},
	},
	{
		ID: "m21", Invariant: "H5 D6",
		Name: "a subscriber whose writes stall is never closed",
		File: "subscribe/subscriber.go",
		Old:  "case now.Sub(since) >= cfg.StallTimeout:",
		New:  "case false && now.Sub(since) >= cfg.StallTimeout:",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestStalledSubscriberClosed$"},
		},
	},
	{
		ID: "m22", Invariant: "H7",
		Name: "the scratch budget of all spills is never enforced",
		File: "upstream/limits.go",
		Old:  "if held := s.held.Add(n); held > s.budget {",
		New:  "if held := s.held.Add(n); held > s.budget && false {",
		Tests: []Test{
			{Pkg: "./upstream", Run: "^TestGetRepoScratchBudgetBoundsEndlessBodies$"},
		},
	},
	{
		ID: "m23", Invariant: "X4",
		Name: "events of one batch share a time_us",
		File: "archive/writer.go",
		Old:  "w.lastUS = max(now, w.lastUS+1)",
		New:  "w.lastUS = max(now, w.lastUS)",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestTimeStrictlyIncreasesPerEvent$"},
		},
	},
	{
		ID: "m24", Invariant: "X5",
		Name: "an old event served from the live log counts as live",
		File: "subscribe/subscriber.go",
		Old:  "if e.Event.TimeUS < s.oldBefore {",
		New:  "if false && e.Event.TimeUS < s.oldBefore {",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestReplayFromLiveLogCountsAsReplay$"},
		},
	},
	{
		ID: "m25", Invariant: "X5",
		Name: "permessage-deflate negotiated but never applied",
		File: "subscribe/subscriber.go",
		Old:  "defl:     !req.compress && deflateNegotiated(sock),",
		New:  "defl:     false && deflateNegotiated(sock),",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestDeflate$"},
		},
	},
	{
		ID: "m26", Invariant: "K1",
		Name: "an account taken down keeps its records through compaction",
		File: "archive/compact_codec.go",
		Old:  `return status == "deleted" || status == "takendown"`,
		New:  `return status == "deleted"`,
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCompactRules$"},
		},
	},
	{
		ID: "m27", Invariant: "K4",
		Name: "a subscriber sends live-log entries a compaction pass removed",
		File: "subscribe/subscriber.go",
		Old:  "if e.Forgotten() {",
		New:  "if false && e.Forgotten() {",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestReplayDuringCompaction$"},
		},
	},
	{
		ID: "m28", Invariant: "G2",
		Name: "a repair pass compares listed revs before a unit of its own is durable (the stream's accepted commits not yet in the ratchet)",
		File: "repair/runner.go",
		Old:  "\tif err := r.submit(ctx, &archive.Unit{}); err != nil {\n\t\treturn false, fmt.Errorf(\"wait for the stream's accepted frames: %w\", err)\n\t}\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestPassWaitsForItsOwnUnit$"},
		},
	},
	{
		ID: "m29", Invariant: "V1",
		Name: "a live commit is archived whenever its account's document is in memory, its signature unchecked",
		File: "firehose/verify.go",
		Old:  "if err == nil && s.verifiedBy(info.Key) {",
		New:  "if err == nil {",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLiveVerification$"},
		},
	},
	{
		ID: "m30", Invariant: "V1",
		Name: "a signature that fails with the account's key passes (repos and live commits alike)",
		File: "ident/ident.go",
		Old:  "func (r *Resolver) Verify(ctx context.Context, info *Info, fresh bool, c *repo.Commit) (*Info, error) {\n\terr := c.VerifySignature(info.Key)\n",
		New:  "func (r *Resolver) Verify(ctx context.Context, info *Info, fresh bool, c *repo.Commit) (*Info, error) {\n\terr := c.VerifySignature(info.Key)\n\terr = nil\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestIdentityFaultsFailTheRepoWithTheirClass$"},
			{Pkg: "./firehose", Run: "^TestLiveVerification$"},
		},
	},
	{
		ID: "m31", Invariant: "V3",
		Name: "a live commit whose ops do not invert to its prevData is archived (the inversion's result unchecked)",
		File: "firehose/verify.go",
		Old:  "if root != cid.Cid(*m.PrevData) {",
		New:  "if false && root != cid.Cid(*m.PrevData) {",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLiveVerification$"},
		},
	},
	{
		ID: "m32", Invariant: "V2",
		Name: "a repo served by a host that is not the account's PDS is taken (authority unchecked)",
		File: "ident/ident.go",
		Old:  "func CheckAuthority(info *Info, host string, trusted ...string) error {\n\tif host == \"\" {",
		New:  "func CheckAuthority(info *Info, host string, trusted ...string) error {\n\tif true || host == \"\" {",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestIdentityFaultsFailTheRepoWithTheirClass$"},
		},
	},
	{
		ID: "m33", Invariant: "E6",
		Name: "a CAR block whose bytes do not hash to its CID is taken (the sha2-256 fast path)",
		File: "internal/car/car.go",
		Old:  "\t\tif !bytes.Equal(sum[:], sec[4:sha256CIDLen]) {\n",
		New:  "\t\tif false && !bytes.Equal(sum[:], sec[4:sha256CIDLen]) {\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^(TestJobHostileCARsEmitNothing|TestVerifyFailures)$"},
		},
	},
	{
		ID: "m34", Invariant: "G1",
		Name: "a seq skip above the threshold is counted but not recorded as a gap",
		File: "firehose/gap.go",
		Old:  "\t\tif seq-c.last-1 > c.cfg.GapThreshold {\n",
		New:  "\t\tif false && seq-c.last-1 > c.cfg.GapThreshold {\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestSeqSkipAndRegression$"},
		},
	},
	{
		ID: "m35", Invariant: "N1 N2",
		Name: "the sink publishes without the stream sequence each message must follow",
		File: "natssink/publish.go",
		Old:  "p.msg.Header = nats.Header{nats.MsgIdHdr: p.hID, HeaderDID: p.hDID, nats.ExpectedLastSeqHdr: p.hExpect}",
		New:  "p.msg.Header = nats.Header{nats.MsgIdHdr: p.hID, HeaderDID: p.hDID}",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkWindowFaults$"},
		},
	},
	{
		ID: "m36", Invariant: "X4",
		Name: "a time cursor is exclusive: resuming with an event's time_us starts after that event",
		File: "archive/reader.go",
		Old:  "\t\tif t >= us {\n\t\t\thi = seq\n",
		New:  "\t\tif t > us {\n\t\t\thi = seq\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestSeqAtTimeAndIteration$"},
			{Pkg: "./subscribe", Run: "^TestResumeByTimeUS$"},
		},
	},
	{
		ID: "m37", Invariant: "X3",
		Name: "a subscriber without includeSync gets sync frames",
		File: "subscribe/params.go",
		Old:  "if ev.Kind == archive.KindSync && !f.withSync {",
		New:  "if ev.Kind == archive.KindSync && false {",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestReplacementFoldsForV1$"},
		},
	},
	{
		ID: "m38", Invariant: "E10",
		Name: "a 429 retry also spends the ordinary budget",
		File: "backfill/job.go",
		Old:  "\t\t\t\tlimited++\n",
		New:  "\t\t\t\tlimited++\n\t\t\t\tordinary++\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobRateLimitBudget$"},
		},
	},
	{
		ID: "m39", Invariant: "R3",
		Name: "emission chunks of twice the row bound",
		File: "backfill/job_emit.go",
		Old:  "if len(e.events) == e.r.o.ChunkRows {",
		New:  "if len(e.events) == 2*e.r.o.ChunkRows {",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobChunks$"},
		},
	},
	{
		ID: "m40", Invariant: "R3",
		Name: "emission never waits for its chunks in flight (a big repo queued whole)",
		File: "backfill/job_emit.go",
		Old:  "if over := e.submitted - e.received - e.r.o.ChunksInFlight; over >= 0 {",
		New:  "if over := e.submitted - e.received - e.r.o.ChunksInFlight; false && over >= 0 {",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobChunks$"},
		},
	},
	{
		ID: "m41", Invariant: "V7 V4",
		Name: "an #identity event does not drop the account's cached document",
		File: "ident/handle.go",
		Old:  "\tr.Invalidate(did)\n\tif handle == \"\" {",
		New:  "\tif handle == \"\" {",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLiveVerification$"},
			{Pkg: "./ident", Run: "^TestIdentityWithoutHandleAnnouncesRotation$"},
		},
	},
	{
		ID: "m42", Invariant: "K3",
		Name: "a compaction pass removes rows without journaling its intent first",
		File: "archive/compact.go",
		Old:  "\t\tif err := p.writeIntent(); err != nil {\n\t\t\treturn p.res, err\n\t\t}\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCompactPowerLoss$"},
		},
	},
	{
		ID: "m43", Invariant: "E7",
		Name: "a CAR whose commit names another DID than the one requested is taken",
		File: "backfill/verify.go",
		Old:  "if commit.DID != wantDID {",
		New:  "if false && commit.DID != wantDID {",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^(TestVerifyFailures|TestJobHostileCARsEmitNothing)$"},
		},
	},
	{
		ID: "m44", Invariant: "E14",
		Name: "getRepo follows one redirect more than MaxRedirects",
		File: "upstream/guard.go",
		Old:  "if len(via) > MaxRedirects {",
		New:  "if len(via) > MaxRedirects+1 {",
		Tests: []Test{
			{Pkg: "./upstream", Run: "^TestGetRepoRedirectChain$"},
		},
	},
	{
		ID: "m45", Invariant: "E14 V6",
		Name: "a private address (10/8, 172.16/12, 192.168/16, fc00::/7) is dialled",
		File: "upstream/guard.go",
		Old:  "\tcase ip.IsPrivate():\n",
		New:  "\tcase false && ip.IsPrivate():\n",
		Tests: []Test{
			{Pkg: "./upstream", Run: "^(TestGetRepoForbiddenRedirects|TestGuard.*)$"},
		},
	},
	{
		ID: "m46", Invariant: "D4",
		Name: "the collection filter also drops account, identity and sync events",
		File: "subscribe/params.go",
		Old:  "if !ev.Kind.IsCommit() || f.allCollections() {",
		New:  "if f.allCollections() {",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestFilterMatrix$"},
		},
	},
	{
		ID: "m47", Invariant: "V8",
		Name: "live frames go to a random verification lane, not their account's (an account's frames checked out of order)",
		File: "firehose/pipeline.go",
		Old:  "return int(maphash.String(p.seed, did) % uint64(len(p.lanes)))",
		New:  "return int(maphash.String(maphash.MakeSeed(), did) % uint64(len(p.lanes)))",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestPipelineKeepsAccountOrder$"},
		},
	},
	{
		ID: "m48", Invariant: "K1",
		Name: "a record run is read for an rkey below its lowest member (the bound off by one)",
		File: "archive/recrun.go",
		Old:  "bytes.Compare(rkey, r.lo) >= 0 &&",
		New:  "bytes.Compare(rkey, r.lo) > 0 &&",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestRecordRunBounds$"},
		},
	},
	{
		ID: "m49", Invariant: "K1",
		Name: "a live commit's creates fold into run entries (every later delete in the collection reads them all)",
		File: "archive/event.go",
		Old:  "return s == SourceBackfill || s == SourceRetry }",
		New:  "return s == SourceBackfill || s == SourceRetry || s == SourceLive }",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestRecordRunsOnlyOfDownloads$"},
		},
	},
	{
		ID: "m50", Invariant: "G2",
		Name: "a commit with a since of an account no listing named is archived and the account never fetched",
		File: "archive/writer.go",
		Old:  "\tif !known {\n\t\treturn discover\n\t}",
		New:  "\tif !known {\n\t\treturn false\n\t}",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestUnknownAccountWithSinceIsDiscovered$"},
		},
	},
	{
		ID: "m51", Invariant: "V4 V9",
		Name: "an op of the PLC export replaces a document resolved after it (an older key and PDS come back)",
		File: "ident/export.go",
		Old:  "return prev.KeyMultibase == \"\" || !prev.exported && !prev.FetchedAt.Before(at)",
		New:  "return prev.KeyMultibase == \"\"",
		Tests: []Test{
			{Pkg: "./ident", Run: "^TestReadExportNeverBringsBackAnOlderIdentity$"},
		},
	},
	{
		ID: "m52", Invariant: "G2",
		Name: "a repair pass forgets which absent accounts it checked (every pass checks the same first ones)",
		File: "repair/absent.go",
		Old:  "r.absentFrom = absent[len(absent)-1].did",
		New:  "r.absentFrom = \"\"",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestAbsentAccounts$"},
		},
	},
	{
		ID: "m53", Invariant: "M4",
		Name: "the merge walk never reopens its cap/ iterator (every table compacted meanwhile stays pinned)",
		File: "merge/walker.go",
		Old:  "t.Sub(opened) >= iterMaxAge {",
		New:  "t.Sub(opened) >= iterMaxAge && false {",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestWalkReleasesCompactedTables$"},
		},
	},
	{
		ID: "m54", Invariant: "V4",
		Name: "an identity fetched while the wall clock ran ahead stays fresh until the clock passes it",
		File: "ident/ident.go",
		Old:  "\tif !info.FetchedAt.After(now) {\n\t\treturn info\n\t}\n\tc := *info",
		New:  "\tif true {\n\t\treturn info\n\t}\n\tc := *info",
		Tests: []Test{
			{Pkg: "./ident", Run: "^(TestClockAheadIdentRows|TestClockAheadInMemory)$"},
		},
	},
	{
		ID: "m55", Invariant: "K4",
		Name: "compaction ignores its configured bound on one account's removal batch",
		File: "archive/compact.go",
		Old:  "n > p.opts.MaxAccountBatch {",
		New:  "n > MaxCompactAccountBatch {",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCompactAccountTooLarge$"},
		},
	},
	{
		ID: "m56", Invariant: "N6",
		Name: "the NATS sink holds its store iterator however long acknowledgements take (tables compacted meanwhile stay on disk)",
		File: "natssink/publish.go",
		Old:  "now.Sub(p.itOpened) >= iterMaxAge {",
		New:  "now.Sub(p.itOpened) >= iterMaxAge && false {",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkReleasesCompactedTables$"},
		},
	},
	{
		ID: "m57", Invariant: "X4",
		Name: "the upgrade does not name where the stream starts (a client dropped before its first event loses what was archived meanwhile)",
		File: "subscribe/server.go",
		Old:  "upgrader.Upgrade(hj, r, http.Header{StartCursorHeader: {strconv.FormatUint(start, 10)}})",
		New:  "upgrader.Upgrade(hj, r, nil)",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestStartCursorHeader$"},
			{Pkg: "./cmd/backstream", Run: "^TestTailLiveLosesNothingBeforeItsFirstPrint$"},
		},
	},
	{
		ID: "m58", Invariant: "G7",
		Name: "the default mode lists hosts behind a relay that gives no account counts (every large host's listing cut at the fallback bound)",
		File: "bootstrap/roster.go",
		Old:  "if listable(e.Status) && e.Accounts > 0 {",
		New:  "if listable(e.Status) && e.Accounts >= 0 {",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetModeWithoutAccountCounts$"},
		},
	},
	{
		ID: "m59", Invariant: "C7",
		Name: "an upgraded pre-index store's resynced accounts are left unmarked (the records their older replacements dropped stay live)",
		File: "archive/resynced.go",
		Old:  "\tif st.Refetch == RefetchNone {\n\t\tst.Refetch = RefetchSync\n\t}\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestOpenMarksOlderReplacements$"},
		},
	},
	{
		ID: "m60", Invariant: "G7",
		Name: "discovery leaves the accounts past a host's too_many_entries cut unlisted (the relay fallback only when every host failed)",
		File: "merge/discovery.go",
		Old:  "if (len(failed) == len(hosts) || tooMany > 0) && cfg.Source != nil {",
		New:  "if len(failed) == len(hosts) && cfg.Source != nil {",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestDiscoveryTooManyEntriesListsRelay$"},
		},
	},
	{
		ID: "m61", Invariant: "M6 G4",
		Name: "discovery and the repair passes list the roster hosts one after another (a pass of tens of thousands of hosts costs as many round trips in a row)",
		File: "merge/discovery.go",
		Old:  "g.SetLimit(workers)",
		New:  "g.SetLimit(1)",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestDiscoveryListsHostsAtOnce$"},
			{Pkg: "./repair", Run: "^TestHostsModeListsHostsAtOnce$"},
		},
	},
	{
		ID: "m62", Invariant: "G2",
		Name: "a repair pass keeps the DIDs it listed until the next pass begins (a whole network's accounts held all day)",
		File: "repair/absent.go",
		Old:  "\tdefer seen.release()\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestListedSetReleased$"},
		},
	},
	{
		ID: "m63", Invariant: "H9",
		Name: "a repair pass resumed after a restart between a host's too_many_entries cut and the relay's first page forgets the cut (the accounts past it are not compared in that pass)",
		File: "repair/lanes.go",
		Old:  "\t\t} else {\n\t\t\terr = r.cutEarlier(h, pos, seen)\n\t\t}\n",
		New:  "\t\t}\n",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestHostsModeCutBeforeRestartListsRelay$"},
		},
	},
	{
		ID: "m64", Invariant: "H10",
		Name: "an ended park is never cleared from host/ (a host parked once keeps its row for good)",
		File: "retry/runner.go",
		Old:  "\t\tif err == nil {\n\t\t\terr = e.clearParks()\n\t\t}\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestEndedParksLeaveNoHostRows$"},
		},
	},
	{
		ID: "m65", Invariant: "C7",
		Name: "the first open of an older store commits every mark in one batch (gigabytes on the real network)",
		File: "archive/resynced.go",
		Old:  "if inBatch++; inBatch < resyncedBatch {",
		New:  "if inBatch++; true {",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestOpenMarksOlderReplacementsInBatches$"},
		},
	},
	{
		ID: "m66", Invariant: "S3",
		Name: "every Wake makes a full pass of the retry runner (the whole due index read again, several times a second)",
		File: "retry/runner.go",
		Old:  "return wakeKind(false), nil, true",
		New:  "return wakeKind(true), nil, true",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestWakeReadsOnlyNewDueRepos$"},
		},
	},
	{
		ID: "m67", Invariant: "G2",
		Name: "a gap's close look reads no mark past now (a mark a 429 pushed ahead lets the gap close before it is fetched)",
		File: "repair/runner.go",
		Old:  "if err != nil || n > 0 {",
		New:  "if true {",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestCloseLooksAtTheReposDue$"},
		},
	},
	{
		ID: "m68", Invariant: "H11",
		Name: "hosts mode starts a lane runner for every roster host (a million-host roster, a million goroutines)",
		File: "bootstrap/lanes.go",
		Old:  "for range min(listing, laneRunnersPerWorker*c.cfg.Workers) {",
		New:  "for range listing {",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetLanesBoundedGoroutines$"},
		},
	},
	{
		ID: "m69", Invariant: "H11",
		Name: "the dispatch round-robin skips the host after one it served (unfair: a host served twice before another once)",
		File: "bootstrap/fleet.go",
		Old:  "\tif !s.pop(j.host) {\n\t\ts.next++ // the host stays in the round, served again after the others\n\t}\n",
		New:  "\ts.pop(j.host)\n\ts.next++\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestSchedulerFairAcrossDrainAndRefill$"},
		},
	},
	{
		ID: "m70", Invariant: "H11",
		Name: "hosts mode's lanes draw on no shared window (each host's share alone: a million-host roster lists a billion entries ahead)",
		File: "bootstrap/coordinator.go",
		Old:  "\t\tshared = newCredit(int64(cfg.Window), nil)\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetWindowBoundsEveryHost$"},
		},
	},
	{
		ID: "m71", Invariant: "S3",
		Name: "a Wake after a replacement deferred for the record index reads only what came due since (the deferred repo waits for the scan period)",
		File: "retry/runner.go",
		Old:  "if full || ended || e.s.parkEnded() || e.deferred.Swap(false) {",
		New:  "if full || ended || e.s.parkEnded() {",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestWakeAfterIndexPendingReadsDeferred$"},
		},
	},
	{
		ID: "m72", Invariant: "C7",
		Name: "a start's one-time read never shows its rows read on /status (the step stays at 0 rows while it reads)",
		File: "archive/startup.go",
		Old:  "p.shown.RowsRead = p.rows",
		New:  "p.shown.RowsRead = 0",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestStartShowsEachStep$"},
		},
	},
	{
		ID: "m73", Invariant: "C7",
		Name: "a start's one-time read stays on /status after it ends",
		File: "archive/startup.go",
		Old:  "p.rep.step = nil",
		New:  "p.rep.step = p.shown",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestStartShowsEachStep$"},
		},
	},
	{
		ID: "m74", Invariant: "G7",
		Name: "--enumerate relay after a hosts-mode bootstrap: discovery and the repair passes list the recorded hosts",
		File: "bootstrap/roster.go",
		Old:  "\tcase EnumerateRelay:\n\t\treturn true\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestDiscoveryRelayAskedListsRelay$"},
			{Pkg: "./repair", Run: "^TestRelayAskedPassListsRelay$"},
		},
	},
	{
		ID: "m75", Invariant: "R1",
		Name: "a negative integer below int64's minimum passes the record scan (archived, never rendered)",
		File: "backfill/record_cbor.go",
		Old:  "return pos, arg <= math.MaxInt64",
		New:  "return pos, arg <= math.MaxUint64",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^(TestWellFormedCBORMap|FuzzRecordCBOR)$"},
		},
	},
	{
		ID: "m76", Invariant: "S1",
		Name: "a live op's record block is archived whatever it holds (not checked as backfill checks it)",
		File: "firehose/frame.go",
		Old:  "if !backfill.WellFormedRecord(op.Record) {",
		New:  "if !backfill.WellFormedRecord(op.Record) && len(op.Record) < 0 {",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestHandleValidation$"},
		},
	},
	{
		ID: "m77", Invariant: "X2",
		Name: "the replay index backfill runs only on a check tick with no pass due (passes due at every tick starve it)",
		File: "node/compaction.go",
		Old:  "\t\t\t\tif err == nil {\n\t\t\t\t\terr = c.fillReplayIndex(ctx)",
		New:  "\t\t\t\tif err == nil && !passed {\n\t\t\t\t\terr = c.fillReplayIndex(ctx)",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestCompactionOwner_ReplayIndexBackfillBesidePasses$"},
		},
	},
	{
		ID: "m78", Invariant: "H11",
		Name: "a fleet host's failed page tries limited per host, not across hosts (thousands of hosts down flood the log)",
		File: "bootstrap/enumerate.go",
		Old:  "f.lines.Log(b.cfg.Logger, slog.LevelWarn, key, msg, args...)",
		New:  "f.lines.Log(b.cfg.Logger, slog.LevelWarn, key+host, msg, args...)",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetDeadHostsLogBounded$"},
		},
	},
	{
		ID: "m79", Invariant: "N5",
		Name: "the NATS sink does not write its position as it stops (a stream its limits emptied meanwhile gets publishes again)",
		File: "natssink/sink.go",
		Old:  "\t\t\t\ts.saveLast(ctx, saved)\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkWritesItsPositionAsItStops$"},
		},
	},
	{
		ID: "m80", Invariant: "N5",
		Name: "an empty interest-retention stream is taken for a purge and filled again from --nats-from (refused as duplicates, for ever)",
		File: "natssink/publish.go",
		Old:  "\tcase c.Retention != jetstream.LimitsPolicy:\n\t\treturn true",
		New:  "\tcase c.Retention != jetstream.LimitsPolicy:\n\t\treturn false",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkInterestRetention$"},
		},
	},
	{
		ID: "m81", Invariant: "N5",
		Name: "a limit given to the stream while the sink publishes is taken for a purge (the sink stops, asking for one)",
		File: "natssink/purge.go",
		Old:  "if remove, _ := limits(info.Config); len(remove) > 0 {\n\t\t\t\treturn // a limit given",
		New:  "if remove, _ := limits(info.Config); len(remove) < 0 {\n\t\t\t\treturn // a limit given",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkLimitAddedWhileRunning$"},
		},
	},
	{
		ID: "m82", Invariant: "N3",
		Name: "a NATS connection closed for good (credentials refused twice) is never dialled again",
		File: "natssink/sink.go",
		Old:  "\t\tif nc.IsClosed() {",
		New:  "\t\tif nc.IsClosed() && nc == nil {",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkCredentialsRefusedThenRestored$"},
		},
	},
	{
		ID: "m83", Invariant: "K3",
		Name: "a compaction halt found at start is not counted in passes_total{outcome=\"halted\"}",
		File: "node/compaction.go",
		Old:  "\tc.cfg.metrics.passes.WithLabelValues(passHalted).Inc()\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestCompactionOwner_HaltAtStartCounts$"},
		},
	},
	{
		ID: "m84", Invariant: "H11",
		Name: "a fleet host's page waits out its retry backoff holding a lane runner (hosts that are down hold every runner)",
		File: "bootstrap/enumerate.go",
		Old:  "\t\tif host != \"\" {\n\t\t\treturn upstream.Page{}, wait, nil",
		New:  "\t\tif host != \"\" && wait < 0 {\n\t\t\treturn upstream.Page{}, wait, nil",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetDeadHostsDoNotStarveHealthyOnes$"},
		},
	},
	{
		ID: "m85", Invariant: "H11",
		Name: "a parked lane that is due is taken before a lane not yet begun (dead hosts' retries keep re-occupying the runners)",
		File: "bootstrap/lanes.go",
		Old:  "if len(p.parked) > 0 && len(p.todo) == 0 {",
		New:  "if len(p.parked) > 0 && (len(p.todo) == 0 || !p.parked[0].due.After(now)) {",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetDeadHostsDoNotStarveHealthyOnes$"},
		},
	},
	{
		ID: "m86", Invariant: "H11",
		Name: "a failing host listed again whose page fails again keeps its passed next attempt on /status",
		File: "bootstrap/lanes.go",
		Old:  "\t\tb.hosts().tryingAt(r.host, r.due)\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetFailingHostNextAttemptIsItsNextTry$"},
		},
	},
	{
		ID: "m87", Invariant: "H12 G6",
		Name: "hosts mode skips idle roster hosts again (their accounts never archived; an idle host's accounts decided on another host's word)",
		File: "bootstrap/roster.go",
		Old:  "return status != RosterBanned && status != RosterLeft",
		New:  "return status != RosterBanned && status != RosterLeft && status != \"idle\"",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestRosterListsAllButBanned$"},
			{Pkg: "./node", Run: "^TestHostsOfEveryStatusButBannedListed$"},
			{Pkg: "./node", Run: "^TestForeignHostClaimsAreIgnored$"},
		},
	},
	{
		ID: "m88", Invariant: "G4",
		Name: "a roster host cut before it listed anything makes the pass incomplete (a host down stops every absent check)",
		File: "repair/lanes.go",
		Old:  "if l.host == \"\" || l.pos.Listed > 0 {",
		New:  "if l.host == \"\" || l.pos.Listed >= 0 {",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestDownOfflineHostLeavesAuditsWhole$"},
		},
	},
	{
		ID: "m89", Invariant: "V2",
		Name: "a DID document's PDS endpoint compared as written (a document naming https://pds:443 refuses a download from pds)",
		File: "ident/ident.go",
		Old:  "\treturn upstream.CanonicalHost(u.Scheme, u.Host)\n}",
		New:  "\treturn u.Host\n}",
		Tests: []Test{
			{Pkg: "./ident", Run: "^TestCheckAuthoritySpellings$"},
			{Pkg: "./backfill", Run: "^TestAuthorityOverASpelledEndpoint$"},
		},
	},
	{
		ID: "m90", Invariant: "H12",
		Name: "a relay's roster status left read as backstream's own (the host never listed)",
		File: "bootstrap/roster.go",
		Old:  "\tif s == RosterLeft {\n\t\treturn RosterOther\n\t}\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestRosterRelayWordsApartFromOurs$"},
		},
	},
	{
		ID: "m91", Invariant: "S3",
		Name: "a host's drained queue share starts a full pass again (a one-host backlog of N read N/256 times a repo)",
		File: "retry/runner.go",
		Old:  "return passResume, resume, true",
		New:  "return passFull, nil, true",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestOneHostBacklogReadsLinearly$"},
		},
	},
	{
		ID: "m92", Invariant: "S3",
		Name: "the scan period's pass is always a full one (a draining backlog read in full every 30 s)",
		File: "retry/runner.go",
		Old:  "func (e *exec) fullDue() bool {\n\treturn ",
		New:  "func (e *exec) fullDue() bool {\n\treturn true || ",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestOneHostBacklogReadsLinearly$"},
		},
	},
	{
		ID: "m93", Invariant: "S3",
		Name: "resume passes put off the scan period's pass (other hosts' repos coming due wait for a host's backlog)",
		File: "retry/runner.go",
		Old:  "\t\tif kind != passResume {\n\t\t\te.timerAt",
		New:  "\t\tif true {\n\t\t\te.timerAt",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestBacklogLeavesOtherHostsOnTime$"},
		},
	},
	{
		ID: "m94", Invariant: "R7",
		Name: "ScanRepos hands a page on with its iterator still open (the restart pass pins every table a compaction obsoletes while its units wait)",
		File: "archive/read.go",
		Old:  "\t\tif err := it.Close(); err != nil {\n\t\t\treturn &KeyError{Key: \"repo/<scan>\", Kind: ErrRead, Err: err}\n\t\t}\n\t\tfor _, r := range page {\n\t\t\tif err := fn(r.did, r.st); err != nil {\n\t\t\t\treturn err\n\t\t\t}\n\t\t}\n",
		New:  "\t\tfor _, r := range page {\n\t\t\tif err := fn(r.did, r.st); err != nil {\n\t\t\t\treturn err\n\t\t\t}\n\t\t}\n\t\tif err := it.Close(); err != nil {\n\t\t\treturn &KeyError{Key: \"repo/<scan>\", Kind: ErrRead, Err: err}\n\t\t}\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestRestartPassPinsNoTables$"},
		},
	},
	{
		ID: "m95", Invariant: "H11",
		Name: "roster hosts begun in name order whatever their status (blackholed offline hosts hold back a healthy host's first page)",
		File: "bootstrap/roster.go",
		Old:  "\tcase \"offline\":\n\t\treturn 2\n",
		New:  "\tcase \"offline\":\n\t\treturn 0\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetOfflineHostsBegunLast$"},
		},
	},
	{
		ID: "m96", Invariant: "G8",
		Name: "closing a gap deletes no older closed gap (gap/ grows by an audit a day for ever)",
		File: "repair/runner.go",
		Old:  "over := len(closed) - (keptClosedGaps - 1)",
		New:  "over := 0 * (len(closed) - (keptClosedGaps - 1))",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestClosedGapsBounded$"},
		},
	},
	{
		ID: "m97", Invariant: "N3",
		Name: "the removal of the NATS stream's only message taken for a purge (the whole archive published again)",
		File: "natssink/purge.go",
		Old:  "case gone(j.prev, cur) <= 1:",
		New:  "case gone(j.prev, cur) <= 0:",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkOnlyMessageRemoved$"},
		},
	},
	{
		ID: "m98", Invariant: "H13",
		Name: "failed repos' lines limited per account, not per class (a down host's accounts flood the log on every try)",
		File: "backfill/job.go",
		Old:  "r.lines.Log(r.o.Logger, slog.LevelInfo, res.Class, ",
		New:  "r.lines.Log(r.o.Logger, slog.LevelInfo, res.Class+res.DID, ",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobFailedLogBounded$"},
		},
	},
	{
		ID: "m99", Invariant: "H13",
		Name: "disconnect lines limited per connection, not per reason (a client reconnecting to be closed writes a line a connection)",
		File: "subscribe/subscriber.go",
		Old:  "s.srv.lines.Log(s.log, slog.LevelInfo, \"disconnected/\"+reason, ",
		New:  "s.srv.lines.Log(s.log, slog.LevelInfo, \"disconnected/\"+reason+s.ws.RemoteAddr().String(), ",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestDisconnectLogBounded$"},
		},
	},
	{
		ID: "m100", Invariant: "G7",
		Name: "the roster gauge and /status read every host/ row at each scrape and build (a million-host roster a third of a CPU-second a scrape)",
		File: "bootstrap/roster.go",
		Old:  "if !v.have || v.gen != gen {",
		New:  "if true || !v.have || v.gen != gen {",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestRosterScrapeReadsNoHostRows$"},
		},
	},
	{
		ID: "m101", Invariant: "H1",
		Name: "a disk fault while the start runs not returned by node.New (a stuck write hangs the start with healthy probes)",
		File: "node/node.go",
		Old:  "\tcase err := <-faulted:\n",
		New:  "\tcase err := <-make(chan error):\n",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestNewStopsOnStuckDisk$"},
		},
	},
	{
		ID: "m102", Invariant: "C6",
		Name: "the relay the store recorded compared as written (a --relay with or without :443 refused as another relay)",
		File: "node/node.go",
		Old:  "\t\tf.Stored = upstream.CanonicalHost(scheme, f.Stored)\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestSameRelaySpelledOtherwise$"},
		},
	},
	{
		ID: "m103", Invariant: "H1",
		Name: "the store's reads not timed (a read stuck for good hangs the process with healthy probes)",
		File: "archive/store.go",
		Old:  "from prepare.\n\tif !opts.ReadOnly {\n",
		New:  "from prepare.\n\ts.pfs = s.fs\n\tif !opts.ReadOnly {\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestStuckReadIsAFault$"},
		},
	},
	{
		ID: "m104", Invariant: "H11",
		Name: "a host that has answered waits for a listRepos slot in turn with hosts that have not (blackholed hosts the relay calls active ahead of each of its next pages)",
		File: "bootstrap/fleet.go",
		Old:  "b.listSlots.Acquire(ctx, r.answered)",
		New:  "b.listSlots.Acquire(ctx, false)",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetAnsweredHostNotStarvedByUntested$"},
		},
	},
	{
		ID: "m108", Invariant: "H7",
		Name: "the per-host limits keyed by the host only lower-cased (PDS.Example. and pds.example two download caps and two paced budgets)",
		File: "upstream/guard.go",
		Old:  "\tc := url.URL{Host: CanonicalHost(u.Scheme, u.Host)}\n",
		New:  "\tc := url.URL{Host: strings.ToLower(u.Host)}\n",
		Tests: []Test{
			{Pkg: "./upstream", Run: "^(TestOneHostOneSlot|TestOneHostOnePace)$"},
		},
	},
	{
		ID: "m109", Invariant: "S4",
		Name: "a repo's recorded host compared to parks as written (repos an older build recorded on PDS.Example:443 run while pds.example is parked)",
		File: "retry/runner.go",
		Old:  "host := upstream.CanonicalHost(r.cfg.Scheme, d.Host)",
		New:  "host := d.Host",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestParkHoldsTheHostInAnySpelling$"},
		},
	},
	{
		ID: "m110", Invariant: "S3",
		Name: "the due count not taken down by finished jobs (a draining backlog shows its first count for hours)",
		File: "retry/runner.go",
		Old:  "\t\t\t// with a next attempt ahead.\n\t\t\te.leftDue(counted.pass)\n",
		New:  "\t\t\t// with a next attempt ahead.\n",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestDueGaugeFollowsABacklog$"},
		},
	},
	{
		ID: "m117", Invariant: "S3",
		Name: "a full pass's due count set as it ends, with the jobs it counted that finished while it waited on the queue (a backlog over the queue shows most of its first count)",
		File: "retry/runner.go",
		Old:  "\t\tr.status.Due = max(0, ps.Due-e.fullLeft)\n",
		New:  "\t\tr.status.Due = ps.Due\n",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestDueGaugeFullPassOverAFullQueue$"},
		},
	},
	{
		ID: "m118", Invariant: "S3",
		Name: "a repo found no longer due taken off the due count though the pass that queued it only read it again as its last job ended (taken off twice)",
		File: "retry/runner.go",
		Old:  "\t\t\tif counted.counted {\n\t\t\t\te.leftDue(counted.pass)\n\t\t\t}\n",
		New:  "\t\t\te.leftDue(counted.pass)\n",
		Tests: []Test{
			{Pkg: "./retry", Run: "^TestDueGaugeFullPassOverAFullQueue$"},
		},
	},
	{
		ID: "m114", Invariant: "G6",
		Name: "a repair pass compares an account's recorded host to the roster as written (an older build's PDS.Example:443 account taken on another roster host's word)",
		File: "repair/runner.go",
		Old:  "\th := upstream.CanonicalHost(r.cfg.Scheme, host)\n",
		New:  "\th := host\n",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestForeignHostInAnySpelling$"},
		},
	},
	{
		ID: "m111", Invariant: "N5",
		Name: "the removal of the NATS stream's only message not read back at start (a restart over the still empty stream publishes the whole archive again)",
		File: "natssink/sink.go",
		Old:  "\tcase err == nil:\n\t\ts.removal.Store(&r)\n",
		New:  "\tcase err == nil:\n\t\t_ = r\n",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkOnlyMessageRemovedThenRestart$"},
		},
	},
	{
		ID: "m112", Invariant: "N1",
		Name: "the NATS stream's last message read by nats.go, a direct get when the stream allows them (a lagging replica or mirror answers: events published twice)",
		File: "natssink/publish.go",
		Old:  "msg, err := lastBySubject(ctx, p.nc, p.sink.cfg.Stream, filter)",
		New:  "st, _ := p.js.Stream(ctx, p.sink.cfg.Stream)\n\t\tmsg, err := st.GetLastMsgForSubject(ctx, filter)",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkResumeReadsTheStreamLeader$"},
		},
	},
	{
		ID: "m113", Invariant: "N3",
		Name: "nats.go's own write timeout (a path that takes no bytes blocks a publish, the session and the sink's stop for a minute)",
		File: "natssink/sink.go",
		Old:  "\t\tnats.FlusherTimeout(s.cfg.AckTimeout),\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkStalledSocket$"},
		},
	},
	{
		ID: "m115", Invariant: "H14",
		Name: "a host found not answering is dialed anyway (every try of a blackholed host waits the connect timeout)",
		File: "upstream/breaker.go",
		Old:  "\tif h == nil || !h.down {\n",
		New:  "\tif h == nil || !h.down || true {\n",
		Tests: []Test{
			{Pkg: "./upstream", Run: "^(TestBreakerOpensAfterThreeMisses|TestClientHostDownFailsFast)$"},
			{Pkg: "./backfill", Run: "^TestJobsBlackholedHostCostsFewConnectTimeouts$"},
		},
	},
	{
		ID: "m116", Invariant: "H14",
		Name: "a job that meets its host down sleeps its backoff and tries again (a worker held for nothing, each repo 4 attempts)",
		File: "backfill/job.go",
		Old:  "\tcase errors.Is(err, upstream.ErrHostDown):\n",
		New:  "\tcase false && errors.Is(err, upstream.ErrHostDown):\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobsBlackholedHostCostsFewConnectTimeouts$"},
		},
	},
	{
		ID: "m105", Invariant: "H1",
		Name: "a table's open not timed (a start or a read missing the table cache hangs on an open that never returns, with healthy probes)",
		File: "archive/readstall.go",
		Old:  "\tc := r.calls[fsOpen].begin(&r.epoch)\n\tf, err := r.FS.Open(name, opts...)\n",
		New:  "\tc := new(atomic.Int64)\n\tf, err := r.FS.Open(name, opts...)\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestStuckCallIsAFault$/^Open$"},
			{Pkg: "./node", Run: "^TestNewStopsOnStuckTableOpen$"},
		},
	},
	{
		ID: "m106", Invariant: "H1",
		Name: "a read slow but under the bound not counted nor logged (a disk slowing is seen only once it stops the process)",
		File: "archive/readstall.go",
		Old:  "\t\tif slow > 0 {\n\t\t\tg.slowRead(slow, slowCall)\n",
		New:  "\t\tif slow < 0 {\n\t\t\tg.slowRead(slow, slowCall)\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestSlowReadIsCounted$"},
		},
	},
	{
		ID: "m107", Invariant: "H1",
		Name: "a read-only store's reads not timed (backstream status hangs for ever on a read that never returns)",
		File: "archive/store.go",
		Old:  "from prepare.\n\tif !opts.ReadOnly {\n",
		New:  "from prepare.\n\tif opts.ReadOnly {\n\t\ts.pfs = s.fs\n\t}\n\tif !opts.ReadOnly {\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestReadOnlyStuckReadIsAFault$"},
			{Pkg: "./cmd/backstream", Run: "^TestStatusOnStuckDisk$"},
		},
	},
	{
		ID: "m119", Invariant: "H1",
		Name: "Open's own calls before Pebble starts not looked at by the read timer (a volume that answers no lock, stat or mkdir hangs the open for ever, /healthz ok)",
		File: "archive/readstall.go",
		Old:  "\t\tif st.slot == slot {\n",
		New:  "\t\tif st.slot == slot && false {\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestStuckOpenStepBound$"},
			{Pkg: "./archive", Run: "^TestStuckOpenStepIsAFault$/^(lock|read-only_stat_store_dir)$"},
			{Pkg: "./node", Run: "^TestNewStopsOnStuckLock$"},
		},
	},
	{
		ID: "m120", Invariant: "H1",
		Name: "checkpoint and compaction reset do their read-write work outside archive.Use (a fault is recorded and the command hangs for ever)",
		File: "cmd/backstream/checkpoint.go",
		Old:  "\treturn archive.Use(dataDir, opts, do)\n}\n",
		New:  "\ts, err := archive.Open(dataDir, opts)\n\tif err != nil {\n\t\treturn err\n\t}\n\tdefer s.Close()\n\treturn do(s)\n}\n",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^(TestCheckpointOnStuckDisk|TestCompactionResetOnStuckDisk)$"},
		},
	},
	{
		ID: "m121", Invariant: "R8",
		Name: "/status reports the store's phase row, not the lifecycle's (steady_state while /subscribe refuses)",
		File: "cmd/backstream/serve.go",
		Old:  "\t\trep.Phase = s.lifecyclePhase()\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestServeStatusPhaseIsTheLifecycles$"},
		},
	},
	{
		ID: "m128", Invariant: "H5",
		Name: "a client address's subscriber count kept at 0 once its last subscriber leaves (the admission's map grows with every address that ever subscribed)",
		File: "subscribe/limits.go",
		Old:  "\tif a.perIP[ip]--; a.perIP[ip] <= 0 {\n\t\tdelete(a.perIP, ip)\n\t}\n",
		New:  "\ta.perIP[ip]--\n",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestPerIPCountsForgotten$"},
		},
	},
	{
		ID: "m129", Invariant: "H3",
		Name: "a client address's connection count kept at 0 once its last connection closes (the listener's map grows with every address that ever connected)",
		File: "cmd/backstream/connlimit.go",
		Old:  "\tif l.perIP[key]--; l.perIP[key] <= 0 {\n\t\tdelete(l.perIP, key)\n\t}\n",
		New:  "\tl.perIP[key]--\n",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestConnLimitForgetsAddresses$"},
		},
	},
	{
		ID: "m134", Invariant: "H5",
		Name: "a subscriber's filter not reserved from the buffer budget at the upgrade (10,000 wanted DIDs each, outside every bound)",
		File: "subscribe/limits.go",
		Old:  "\tneed := s.bufBytes + filterBytes\n",
		New:  "\tneed := s.bufBytes\n",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^(TestFilterReservedFromBudget|TestPerIPCountsForgotten)$"},
		},
	},
	{
		ID: "m135", Invariant: "H5",
		Name: "an options_update's filter reserved past the buffer budget (growth not checked)",
		File: "subscribe/limits.go",
		Old:  "if new > old && a.reserved+new-old > s.cfg.BufferBudget {",
		New:  "if false && new > old && a.reserved+new-old > s.cfg.BufferBudget {",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestOptionsUpdateReservesFilter$"},
		},
	},
	{
		ID: "m136", Invariant: "H5 X1",
		Name: "a covering copy read from the shared index iterator where other ranges left it (not sought back to the yielded range's entry): another row's copy sent",
		File: "archive/replayindex.go",
		Old:  "if h.it == x.shared && x.at != h.id {",
		New:  "if false && h.it == x.shared && x.at != h.id {",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestIndexIterHeapBounded$"},
		},
	},
	{
		ID: "m137", Invariant: "H5",
		Name: "the collections listed under a prefix bounded by count only, not by their names' bytes (hundreds of 300-byte names from the network held per replay)",
		File: "archive/replayindex.go",
		Old:  "len(names) == limit || maxBytes < 0 {",
		New:  "len(names) == limit {",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestPrefixPlanHeapBounded$"},
		},
	},
	{
		ID: "m138", Invariant: "H5",
		Name: "a prefix filter's plan lists up to planMaxRanges collections under each prefix (20,000 names from the network held by every replay of app.bsky.*)",
		File: "subscribe/plan.go",
		Old:  "store.CollectionsUnder(pre, planMaxPrefixRanges-listed, planMaxPrefixBytes-bytes)",
		New:  "store.CollectionsUnder(pre, planMaxRanges, 1<<40)",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestPrefixPlanHeapBounded$"},
		},
	},
	{
		ID: "m125", Invariant: "N3",
		Name: "a publish no server took while the stream takes its subject (a leader election) is shown as no stream taking the subject",
		File: "natssink/publish.go",
		Old:  "\t\treturn &noLeaderError{cause: cause, elected: true}\n",
		New:  "\t\treturn nil\n",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkLeaderElectionStatus$"},
		},
	},
	{
		ID: "m126", Invariant: "N3",
		Name: "a stream without a leader leaves the sink in state retrying (no no_leader state)",
		File: "natssink/sink.go",
		Old:  "\t\t\tstate = StateNoLeader\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkStreamWithoutQuorumStatus$"},
		},
	},
	{
		ID: "m127", Invariant: "N5",
		Name: "a trim of the stream's front that leaves a message the stream held at the watch's last look taken for a purge (only the acknowledged messages compared)",
		File: "natssink/purge.go",
		Old:  "\t\t\tcase cur.FirstSeq > j.prev.LastSeq:\n",
		New:  "\t\t\tdefault:\n",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestPurgeJudge$"},
			{Pkg: "./natssink", Run: "^TestSinkFrontTrimmedWhileRunning$"},
		},
	},
	{
		ID: "m122", Invariant: "H8 H1",
		Name: "serve's checkpoint read-back runs at the default stall bound, not --max-write-stall (a stuck read-back holds the request a minute)",
		File: "cmd/backstream/checkpoint.go",
		Old:  "\t\tMaxWriteStall: store.MaxWriteStall(), Released: func() { close(released) }}",
		New:  "\t\tReleased: func() { close(released) }}",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestCheckpointReadBackStuck$"},
		},
	},
	{
		ID: "m123", Invariant: "H8",
		Name: "Pebble's checkpoint built on the destination, not in the store dir (a backup volume that stops answering is a fault of the live store)",
		File: "archive/checkpoint.go",
		Old:  "staging := s.fs.PathJoin(s.stagingDir(), ",
		New:  "staging := s.fs.PathJoin(dir, checkpointStaging, ",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCheckpointStuckDestination$"},
			{Pkg: "./cmd/backstream", Run: "^TestCheckpointEndpointStuckBackupVolume$"},
		},
	},
	{
		ID: "m124", Invariant: "H8",
		Name: "a checkpoint starts while an earlier one's read-back is stuck (one more read-only store left open per request)",
		File: "cmd/backstream/checkpoint.go",
		Old:  "\th.untilReleased(readBack, \"the read-back of \"+to)\n",
		New:  "\t_ = readBack\n",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestCheckpointReadBackStuck$"},
		},
	},
	{
		ID: "m130", Invariant: "C5",
		Name: "Open empties the scratch dir by removing the dir itself (a volume mounted at <data-dir>/scratch fails every start: EBUSY)",
		File: "archive/store.go",
		Old:  "\tfor _, name := range names {\n\t\tif err := s.fs.RemoveAll(s.fs.PathJoin(s.scratch, name)); err != nil {\n",
		New:  "\tfor range names[:min(len(names), 1)] {\n\t\tif err := s.fs.RemoveAll(s.scratch); err != nil {\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestOpenScratchVolume$"},
		},
	},
	{
		ID: "m142", Invariant: "H8",
		Name: "a checkpoint's staged copies not checked against the store volume's floor (a checkpoint near --min-free becomes the live store's disk fault)",
		File: "archive/checkpoint.go",
		Old:  "if need := s.stagedCopyBytes(); sp.Below(floor + need) {",
		New:  "if need := s.stagedCopyBytes(); sp.Below(floor + need - need) {",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCheckpointRoomToStage$"},
			{Pkg: "./cmd/backstream", Run: "^TestCheckpointNeedsRoomToStage$"},
		},
	},
	{
		ID: "m143", Invariant: "H8",
		Name: "a checkpoint that gave up on a copied file's write skips that file's close as a further call (a file handle leaked on the backup volume per stuck checkpoint)",
		File: "archive/checkpoint.go",
		Old:  "if cerr := d.track(\"a close of \"+dst, out.Close); err == nil {\n",
		New:  "if cerr := d.call(\"a close of \"+dst, out.Close); err == nil {\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCheckpointStuckWriteClosesItsFile$"},
		},
	},
	{
		ID: "m139", Invariant: "V3",
		Name: "a live delete op is not checked against the commit's own MST (a relay adds a legacy delete of a record the commit holds, the inversion off)",
		File: "firehose/verify.go",
		Old:  "if val, err := tree.Get([]byte(rop.Path)); err == nil && val != nil {",
		New:  "if val, err := tree.Get([]byte(rop.Path)); false && err == nil && val != nil {",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLiveForgedDeleteOp$"},
		},
	},
	{
		ID: "m140", Invariant: "V10",
		Name: "a live commit's rev is not checked against the clock (a rev a year ahead archived, the account's ratchet moved past its genuine commits)",
		File: "firehose/verify.go",
		Old:  "\tif ident.RevAhead(rev, seen) {\n",
		New:  "\tif false && ident.RevAhead(rev, seen) {\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLiveFutureRevCommit$"},
		},
	},
	{
		ID: "m141", Invariant: "V10",
		Name: "a downloaded repo's rev is not checked against the clock (a repo of a rev a year ahead archived)",
		File: "backfill/job_ident.go",
		Old:  "\t\tif ident.RevAhead(c.Rev, id.Now()) {\n",
		New:  "\t\tif false && ident.RevAhead(c.Rev, id.Now()) {\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestFutureRevRepoFails$"},
		},
	},
	{
		ID: "m131", Invariant: "H1",
		Name: "the start node.New gave up on at a disk fault goes on building the node once the disk answers (writer, download client, metrics)",
		File: "node/node.go",
		Old:  "\tif err := n.store.Fault(); err != nil {\n\t\treturn n, err\n\t}\n\tif err := n.buildJobs(reg); err != nil {",
		New:  "\tif err := n.buildJobs(reg); err != nil {",
		Tests: []Test{
			{Pkg: "./node", Run: "^(TestNewStopsOnStuckLock|TestNewStopsOnStuckRead)$"},
		},
	},
	{
		ID: "m174", Invariant: "H15",
		Name: "a panic in a subscriber's serve loop is not recovered (one connection's bug ends the process)",
		File: "subscribe/subscriber.go",
		Old:  "\t\tif v := recover(); v != nil {\n\t\t\ts.out = s.out[:0]\n",
		New:  "\t\tif v := any(nil); v != nil {\n\t\t\ts.out = s.out[:0]\n",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestSubscriberPanicEndsOnlyItsConnection$"},
		},
	},
	{
		ID: "m175", Invariant: "H15",
		Name: "a panic in a subscriber's read loop is not recovered (one connection's bug ends the process)",
		File: "subscribe/subscriber.go",
		Old:  "\t\tif v := recover(); v != nil {\n\t\t\ts.end(s.panicked(\"read\", v))\n",
		New:  "\t\tif v := any(nil); v != nil {\n\t\t\ts.end(s.panicked(\"read\", v))\n",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestSubscriberPanicEndsOnlyItsConnection$"},
		},
	},
	{
		ID: "m150", Invariant: "G8",
		Name: "the first read of a gap found while the clock ran ahead never let go (16 bytes kept per such gap for the life of the process)",
		File: "repair/runner.go",
		Old:  "\tr.forgetReads(gs)\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestFirstReadsOfGapsLetGo$"},
		},
	},
	{
		ID: "m151", Invariant: "G1",
		Name: "a gap whose pass waits for the stream extended by later holes for ever (a relay breaking its stream more often than its events reach us keeps the pass waiting while it breaks)",
		File: "repair/runner.go",
		Old:  "\t\tr.cfg.GapIDs.Begin(g.ID)\n\t\tr.log.Warn(",
		New:  "\t\tr.log.Warn(",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestPassBeginsUnderABreakingRelay$"},
		},
	},
	{
		ID: "m152", Invariant: "G1",
		Name: "a gap whose pass waits long for a replaying stream no longer extended though no later hole came (a hole after the long replay costs a whole pass of its own)",
		File: "repair/runner.go",
		Old:  " && g.FirstSeenUS != r.waitingFrom && ",
		New:  " && ",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestLongReplayGapStillExtended$"},
		},
	},
	{
		ID: "m156", Invariant: "H13",
		Name: "an archived event that cannot be rendered is logged once per render (a PDS's float records, replayed by every client, flood the log)",
		File: "subscribe/subscriber.go",
		Old:  "\t\ts.lines.Log(l, slog.LevelWarn, \"render/\"+reason, \"subscribe: an archived record its PDS wrote outside the atproto data model cannot be rendered; skipped\", \"seq\", seq, \"err\", err)\n",
		New:  "\t\tl.Warn(\"subscribe: an archived record its PDS wrote outside the atproto data model cannot be rendered; skipped\", \"seq\", seq, \"err\", err)\n",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestRenderErrorLogBounded$"},
		},
	},
	{
		ID: "m157", Invariant: "M8",
		Name: "a live #account whose status is over the archive's bound is refused whole (its inactivity never reaches the repo nor a subscriber)",
		File: "firehose/frame.go",
		Old:  "\t\t\tev.Status = upstream.CutStatus(*b.Status)\n",
		New:  "\t\t\tev.Status = *b.Status\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestAccountStatusCut$"},
		},
	},
	{
		ID: "m144", Invariant: "K5",
		Name: "a pass's reclaim compacts every chunk of ev/ it removed rows from, however little (a few scattered deletes rewrite the archive's tables)",
		File: "archive/compact.go",
		Old:  "\treturn n > 0 && uint64(removed)*uint64(p.opts.ReclaimShare) >= n, nil\n",
		New:  "\treturn n >= 0, nil\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCompactReclaimCostsWhatItRemoves$"},
		},
	},
	{
		ID: "m162", Invariant: "H4",
		Name: "a read-only open of a data dir holding only an interrupted checkpoint says only \"no store here\" (status, checkpoint --data-dir and compaction reset do not name store.partial)",
		File: "archive/store.go",
		Old:  "\t\t\t\tpartial = s.refuseInterruptedCheckpoint()\n",
		New:  "\t\t\t\t_ = s.refuseInterruptedCheckpoint\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestReadOnlyOpenNamesInterruptedCheckpoint$"},
		},
	},
	{
		ID: "m163", Invariant: "C7",
		Name: "backstream status counts an index backfill's seqs to one past the tip (a store of 24,218 rows shown as 24,219 to index)",
		File: "cmd/backstream/status_compaction.go",
		Old:  "return end - min(max(m.Next, 1), end), end - 1\n",
		New:  "return end - min(max(m.Next, 1), end), end\n",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^(TestStatusIndexBackfill|TestStatusIndexBackfillCounts)$"},
		},
	},
	{
		ID: "m164", Invariant: "R7",
		Name: "backstream status on a hosts-mode store without a relay checkpoint says its listing starts from the beginning (each roster host's listing resumes from its own)",
		File: "cmd/backstream/status.go",
		Old:  "case r.Cursors.ListRepos == nil && r.Hosts != nil && r.Hosts.Mode == bootstrap.EnumerateHosts:",
		New:  "case false && r.Cursors.ListRepos == nil && r.Hosts != nil && r.Hosts.Mode == bootstrap.EnumerateHosts:",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestStatusListReposCheckpointLine$"},
		},
	},
	{
		ID: "m165", Invariant: "K3",
		Name: "the first word of a two-word command alone (backstream compaction) is refused as an unknown command, not named as one word short of backstream compaction reset",
		File: "cmd/backstream/main.go",
		Old:  "\t\tif len(begun) > 0 {\n",
		New:  "\t\tif false && len(begun) > 0 {\n",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestTwoWordCommandHalf$"},
		},
	},
	{
		ID: "m166", Invariant: "C2",
		Name: "the event iterator names a malformed ev/ row by its raw key bytes, not its seq (an operator cannot tell which checkpoint predates it)",
		File: "archive/reader.go",
		Old:  "if err := DecodeEvent(e.it.Value(), seq, &e.ev); err != nil {\n\t\te.err = &KeyError{Key: keyString(e.it.Key()),",
		New:  "if err := DecodeEvent(e.it.Value(), seq, &e.ev); err != nil {\n\t\te.err = &KeyError{Key: string(e.it.Key()),",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestMalformedEventNamesItsSeq$"},
		},
	},
	{
		ID: "m167", Invariant: "K3",
		Name: "compaction reset of a malformed watermark reports a compaction intent deleted when there was none",
		File: "cmd/backstream/compaction.go",
		Old:  "\tcase dropped && hadIntent:\n",
		New:  "\tcase dropped && (hadIntent || true):\n",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestCompactionReset$"},
		},
	},
	{
		ID: "m186", Invariant: "H1",
		Name: "a --min-free floor not below the volume's size is reported as a disk full to be freed (no space freed could meet it)",
		File: "archive/diskguard.go",
		Old:  "\tif floor >= sp.Total {\n",
		New:  "\tif false && floor >= sp.Total {\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestFreeSpaceFloorAboveTheVolume$"},
		},
	},
	{
		ID: "m180", Invariant: "G3",
		Name: "a failed firehose dial or connection is not recorded for /status (the relay unreachable shows as connected)",
		File: "firehose/consumer.go",
		Old:  "\t\t\tc.m.disconnected(c.cfg.Now(), err)\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestStatusRelayUnreachable$"},
		},
	},
	{
		ID: "m181", Invariant: "K4",
		Name: "the compaction-halted alert names only the reset (an account over --compaction-max-account-batch is sent to a reset that halts again)",
		File: "deploy/alerts.yml",
		Old:  "            and halt_recovery). An account whose removal is larger than\n            --compaction-max-account-batch: stop backstream and start it again\n            with a larger --compaction-max-account-batch (a reset would halt\n            again at the next pass). A malformed compaction state: stop\n",
		New:  "            and halt_recovery). A malformed compaction state: stop\n",
		Tests: []Test{
			{Pkg: "./deploy", Run: "^TestCompactionHaltedAlertNamesEveryRecovery$"},
		},
	},
	{
		ID: "m182", Invariant: "H1",
		Name: "the free-space check's reading is not kept (/status and /metrics say nothing of the volume nearing the --min-free floor)",
		File: "archive/diskguard.go",
		Old:  "\ts.space.last.Store(&FreeSpace{Free: sp.Free, Total: sp.Total, Floor: floor})\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestStatusShowsFreeSpace$"},
		},
	},
	{
		ID: "m183", Invariant: "N3",
		Name: "a NATS connection down with no error of its own adds nothing to the last error (no server answering shows as a bare timeout)",
		File: "natssink/sink.go",
		Old:  "\t\tcase last == nil:\n\t\t\terr = fmt.Errorf(",
		New:  "\t\tcase last == nil && false:\n\t\t\terr = fmt.Errorf(",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkServersDownNamed$"},
		},
	},
	{
		ID: "m190", Invariant: "S3",
		Name: "the retry runner's state is not on /status (a host parked in steady state shows only as a log line)",
		File: "cmd/backstream/serve.go",
		Old:  "\t\tif r := n.Retrier(); r != nil {\n",
		New:  "\t\tif r := n.Retrier(); r == nil {\n",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestStatusRetrySection$"},
		},
	},
	{
		ID: "m191", Invariant: "H8",
		Name: "a checkpoint that began and failed is not counted (no alert for a backup not taken)",
		File: "cmd/backstream/checkpoint.go",
		Old:  "\t\th.failed.Inc()\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestCheckpointEndpointStuckBackupVolume$"},
		},
	},
	{
		ID: "m176", Invariant: "H1",
		Name: "a hung operation's fault recorded before its disk slow line (the line naming the stuck operation comes after the fault's, behind the stop)",
		File: "archive/diskguard.go",
		Old:  "\tg.lines.Log(g.log, slog.LevelWarn, logDiskSlow, ",
		New:  "\tdefer g.lines.Log(g.log, slog.LevelWarn, logDiskSlow, ",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestHungSyncIsAFault$"},
		},
	},
	{
		ID: "m177", Invariant: "M3",
		Name: "a merged commit of an account the archive holds taken down is kept (bootstrap's listing said taken down, the #account after the captured commit was lost: its records are served for good)",
		File: "archive/writer.go",
		Old:  "\t\t\t\tst.keep[i] = !gone\n",
		New:  "\t\t\t\t_ = gone\n",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestMergedCommitOfListedTakedown$"},
		},
	},
	{
		ID: "m192", Invariant: "N3",
		Name: "an unanswered leader check after the stream was shown without a leader flips the state to retrying",
		File: "natssink/publish.go",
		Old:  "\tcase errors.Is(err, context.DeadlineExceeded) && p.sink.state() == StateNoLeader:\n",
		New:  "\tcase false && errors.Is(err, context.DeadlineExceeded) && p.sink.state() == StateNoLeader:\n",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkNoLeaderUnansweredCheck$"},
		},
	},
	{
		ID: "m197", Invariant: "S1",
		Name: "an #identity whose handle is longer than any handle can be is dropped whole (subscribers never learn the identity changed)",
		File: "firehose/frame.go",
		Old:  "\t\tif len(ev.Handle) > archive.MaxHandle {\n",
		New:  "\t\tif false && len(ev.Handle) > archive.MaxHandle {\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestIdentityHandleTooLong$"},
		},
	},
	{
		ID: "m198", Invariant: "H15",
		Name: "a live frame's shared form is marked made before it is (a panic while making it leaves the other subscribers an empty frame)",
		File: "subscribe/frames.go",
		Old:  "\t\ts.b = build()\n\t\ts.done.Store(true)\n",
		New:  "\t\ts.done.Store(true)\n\t\ts.b = build()\n",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestSharedFramePanicLeavesNoEmptyFrame$"},
		},
	},
	{
		ID: "m199", Invariant: "H13",
		Name: "every render failure counted internal (a PDS's float records page the operator, and share one log line with our own failures)",
		File: "subscribe/metrics.go",
		Old:  "\tif errors.Is(err, ErrBadRecord) {\n\t\treturn RenderUpstreamRecord\n",
		New:  "\tif false && errors.Is(err, ErrBadRecord) {\n\t\treturn RenderUpstreamRecord\n",
		Tests: []Test{
			{Pkg: "./subscribe", Run: "^TestRenderErrorReasons$"},
		},
	},
	{
		ID: "m200", Invariant: "H13",
		Name: "BackstreamRenderErrors fires on every render failure (a PDS's float records page the operator)",
		File: "deploy/alerts.yml",
		Old:  "expr: increase(backstream_subscribe_render_errors_total{reason=\"internal\"}[1h]) > 0\n",
		New:  "expr: increase(backstream_subscribe_render_errors_total[1h]) > 0\n",
		Tests: []Test{
			{Pkg: "./deploy", Run: "^TestAlertRuleUnitTests$"},
		},
	},
	{
		ID: "m205", Invariant: "V3",
		Name: "a live commit that cannot be inverted (no prevData, a legacy op) is taken as fully verified (a delete a relay left out and hid by stripping prevData stays archived)",
		File: "firehose/verify.go",
		Old:  "\t\ts.uninverted = true\n",
		New:  "\t\t_ = s.uninverted\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^(TestLiveHiddenDeleteSchedulesReplacement|TestCaptureVerificationMarks)$"},
			{Pkg: "./node", Run: "^TestHiddenDeleteHealed$"},
		},
	},
	{
		ID: "m206", Invariant: "V2",
		Name: "the PDS service is taken whatever its type (a document's #atproto_pds entry of another type gets authority over the account's repositories)",
		File: "ident/diddoc.go",
		Old:  "if !strings.HasSuffix(s.ID, \"#\"+pdsService) || s.Type != pdsServiceType {",
		New:  "if !strings.HasSuffix(s.ID, \"#\"+pdsService) {",
		Tests: []Test{
			{Pkg: "./ident", Run: "^TestPDSServiceSelection$"},
		},
	},
	{
		ID: "m207", Invariant: "G2",
		Name: "an absent account the relay does not know is asked of its recorded host whatever its DID document names (an account that moved is archived as deleted on its old host's not found)",
		File: "repair/absent.go",
		Old:  "\treturn info.PDSHost(), nil\n",
		New:  "\treturn host, nil\n",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestAbsentAccountThatMovedIsNotDeleted$"},
		},
	},
	{
		ID: "m193", Invariant: "G1",
		Name: "a late frame (below the last accepted seq, under one never accepted: a relay delivering out of order) dropped as a duplicate, with no gap",
		File: "firehose/gap.go",
		Old:  "\t\t\tcase r.seq != seq:\n\t\t\t\tc.m.anomaly(AnomalyLate)\n\t\t\t\treturn seqLate, nil\n",
		New:  "\t\t\tcase r.seq != seq:\n\t\t\t\tc.m.anomaly(AnomalyDuplicate)\n\t\t\t\treturn seqDrop, nil\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLateFrameArchivedOnce$"},
		},
	},
	{
		ID: "m194", Invariant: "G1",
		Name: "another event under an accepted seq (a relay gone back in its sequence by less than the threshold) taken for a duplicate: its new events lost",
		File: "firehose/gap.go",
		Old:  "\t\t\tcase r.key != c.frameKey(f):\n",
		New:  "\t\t\tcase false && r.key != c.frameKey(f):\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestRewoundRelayNewEventsArchived$"},
		},
	},
	{
		ID: "m195", Invariant: "G1",
		Name: "the newest gap the consumers recorded, open with no repair position, not taken up at start (a hole after a restart costs a pass of its own)",
		File: "archive/gaps.go",
		Old:  "\t\t\t\tg.open = &open\n",
		New:  "\t\t\t\t_ = open\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestWaitingGapAdoptedAfterRestart$"},
		},
	},
	{
		ID: "m196", Invariant: "G1",
		Name: "a commit below the window of accepted frames whose rev is newer than the archive's (a relay gone back in its sequence while backstream was down) taken for a duplicate",
		File: "firehose/gap.go",
		Old:  "\t\t} else if newer {\n",
		New:  "\t\t} else if false && newer {\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestRewoundRelayAfterRestart$"},
		},
	},
	{
		ID: "m201", Invariant: "H13",
		Name: "the JSON log writes a duration as an integer of nanoseconds (took 1500000000), not as the text log's 1.5s",
		File: "cmd/backstream/flags.go",
		Old:  "opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}",
		New:  "opts := &slog.HandlerOptions{Level: level}",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestLogDurations$"},
		},
	},
	{
		ID: "m202", Invariant: "H8",
		Name: "a checkpoint's copied file is flushed only by one sync at its end (a slow but steady backup volume fails as stuck)",
		File: "archive/checkpoint.go",
		Old:  "\t\t\t\t_, err := out.SyncTo(written)\n\t\t\t\treturn err\n",
		New:  "\t\t\t\treturn nil\n",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestCheckpointSlowDestination$"},
		},
	},
	{
		ID: "m203", Invariant: "H8",
		Name: "the checkpoint running is not recorded (a stuck checkpoint shows nothing on /status until the request gives up)",
		File: "cmd/backstream/checkpoint.go",
		Old:  "\th.mu.Lock()\n\th.runTo, h.runSince = to, h.now()\n\th.mu.Unlock()\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestStatusCheckpointStuck$"},
		},
	},
	{
		ID: "m204", Invariant: "H8",
		Name: "a failed checkpoint's error is shown on /status whole, not cut to its bound",
		File: "cmd/backstream/checkpoint.go",
		Old:  "h.failErr = now, now, loglimit.Clip(err.Error(), checkpointErrorMax)",
		New:  "h.failErr = now, now, loglimit.Clip(err.Error(), 1<<20)",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestStatusCheckpointStuck$"},
		},
	},
	{
		ID: "m213", Invariant: "G1",
		Name: "the live consumer not given the store (a relay gone back in its sequence while backstream was down: its new commits under seqs below the resumed cursor dropped as duplicates, no gap)",
		File: "lifecycle/runner.go",
		Old:  "Mode: firehose.ModeLive, Store: r.cfg.Store, Cursor: cursor,",
		New:  "Mode: firehose.ModeLive, Cursor: cursor,",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestRewoundRelayAfterRestart$"},
		},
	},
	{
		ID: "m214", Invariant: "G3",
		Name: "a late frame never moves Behind (a relay gone back in its sequence, its new events all late below the cursor: the archive looks behind and the gap's pass waits for the whole stretch)",
		File: "firehose/consumer.go",
		Old:  "\t\tif t <= cur || c.lastEventUS.CompareAndSwap(cur, t) {\n",
		New:  "\t\tif true || t <= cur || c.lastEventUS.CompareAndSwap(cur, t) {\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLateFrameBehind$"},
		},
	},
	{
		ID: "m215", Invariant: "G1",
		Name: "a commit below the window newer than the archive's (a relay gone back in its sequence while backstream was down) archived as late, the position left at the old cursor: the #account or #identity after it dropped as a duplicate",
		File: "firehose/gap.go",
		Old:  "\tif !rows {\n\t\tc.m.anomaly(AnomalyLate)\n",
		New:  "\tif true || !rows {\n\t\tc.m.anomaly(AnomalyLate)\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestRewoundRelayAccountAfterRestart$"},
			{Pkg: "./node", Run: "^TestRewoundRelayAccountBelowCursor$"},
		},
	},
	{
		ID: "m216", Invariant: "G1",
		Name: "a commit below the window newer than the archive's followed even when it brings no rows (a relay replaying more than asked, a commit that failed before: the replayed frames after it archived again)",
		File: "firehose/gap.go",
		Old:  "\tif !rows {\n\t\tc.m.anomaly(AnomalyLate)\n",
		New:  "\tif false && !rows {\n\t\tc.m.anomaly(AnomalyLate)\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestReplayBelowCursorNotFollowed$"},
		},
	},
	{
		ID: "m217", Invariant: "G1",
		Name: "a late frame below the window of accepted frames put in the window (a replay of the frame accepted in its slot taken for a late frame, processed again)",
		File: "firehose/gap.go",
		Old:  "\tif seq <= c.last-n {\n\t\treturn\n\t}\n\tc.recent[seq%n]",
		New:  "\tif false && seq <= c.last-n {\n\t\treturn\n\t}\n\tc.recent[seq%n]",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLateBelowWindowKeepsWindow$"},
		},
	},
	{
		ID: "m218", Invariant: "G2",
		Name: "an absent account whose DID document could not be read (the directory failing) asked of its recorded host (an account that moved is archived as deleted during a directory outage)",
		File: "repair/absent.go",
		Old:  "\tcase ident.UnknownDID(err):\n\t\treturn host, nil\n",
		New:  "\tcase ident.Class(err) != \"\":\n\t\treturn host, nil\n",
		Tests: []Test{
			{Pkg: "./repair", Run: "^TestAbsentAccountThatMovedIsNotDeleted$"},
		},
	},
	{
		ID: "m237", Invariant: "G6",
		Name: "bootstrap takes a roster host's word on an account already fetched from another roster host (a host listing it taken down marks it inactive: the merge drops its captured commits)",
		File: "bootstrap/enumerate.go",
		Old:  "\t\tcase Foreign(b.rosterSet, host, st.Host):\n",
		New:  "\t\tcase false && Foreign(b.rosterSet, host, st.Host):\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetForeignEntryLeavesAccountAlone$"},
		},
	},
	{
		ID: "m238", Invariant: "H11",
		Name: "a fleet host whose announced rate limit is spent asked on its listRepos request slot (the page waits for the reset holding it: every other host's listing waits behind a few such hosts)",
		File: "bootstrap/fleet.go",
		Old:  "\t\tif wait := p.HostPaceWait(r.host); wait > 0 {\n",
		New:  "\t\tif wait := p.HostPaceWait(r.host); false && wait > 0 {\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetPacedHostHoldsNoRequestSlot$"},
		},
	},
	{
		ID: "m239", Invariant: "E8",
		Name: "a download of a host whose announced budget is spent waits for the reset inside the attempt deadline (fails timeout for the run when the reset is further than the deadline)",
		File: "backfill/job.go",
		Old:  "\tif wait := r.hostPaceWait(host); wait > 0 {\n",
		New:  "\tif wait := r.hostPaceWait(host); false && wait > 0 {\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobPaceWaitOutsideDeadline$"},
		},
	},
	{
		ID: "m225", Invariant: "H8",
		Name: "the public listener's /status keeps the checkpoint section and the last warnings (the backup dir, destinations and logged paths shown to anyone reaching it)",
		File: "cmd/backstream/status.go",
		Old:  "\tp.LastErrors, p.Checkpoint = nil, nil\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^(TestStatusPublicWithholdsOperatorSections|TestStatusPagePublic)$"},
		},
	},
	{
		ID: "m226", Invariant: "H13",
		Name: "every NATS sink render failure counted internal (a PDS's float records look like bad archived data or a bug)",
		File: "natssink/metrics.go",
		Old:  "m.render.WithLabelValues(subscribe.RenderErrorReason(err)).Inc()",
		New:  "m.render.WithLabelValues(subscribe.RenderInternal).Inc()",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkRenderErrorReasons$"},
		},
	},
	{
		ID: "m227", Invariant: "H8",
		Name: "the public listener's /healthz names the fatal error (a disk fault's store file shown to anyone reaching it)",
		File: "subscribe/server.go",
		Old:  "\t\t\t\tif withhold {\n\t\t\t\t\t_, _ = fmt.Fprintf(w, \"unhealthy: %s\\n\", WithheldError)\n\t\t\t\t\treturn\n\t\t\t\t}\n",
		New:  "",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^(TestStatusPublicWithholdsOperatorSections|TestServeProbesAfterFatal)$"},
		},
	},
	{
		ID: "m219", Invariant: "V3",
		Name: "a legacy commit of an account already marked and due leaves the mark as it is (a replacement running from a snapshot older than a hidden delete clears it; the record stays archived)",
		File: "firehose/verify.go",
		Old:  "\t\tcase cur.NextAttemptUS >= nowUS:\n\t\t\treturn cur, false\n",
		New:  "\t\tdefault:\n\t\t\treturn cur, false\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLiveHiddenDeleteSchedulesReplacement$"},
			{Pkg: "./node", Run: "^TestHiddenDeleteDuringReplacementHealed$"},
		},
	},
	{
		ID: "m220", Invariant: "V3",
		Name: "--uninverted-refetch-interval never reaches the node (the uninverted replacement stays a day after the last snapshot whatever the operator asks)",
		File: "cmd/backstream/serve.go",
		Old:  "PLCExport: o.plcExport, UninvertedInterval: o.uninvertedInterval,",
		New:  "PLCExport: o.plcExport,",
		Tests: []Test{
			{Pkg: "./cmd/backstream", Run: "^TestServeUninvertedRefetchInterval$"},
		},
	},
	{
		ID: "m221", Invariant: "V3",
		Name: "a legacy commit of an account already marked and due makes it due at once, whenever its last snapshot was (an account committing during each of its replacements downloaded without end)",
		File: "firehose/verify.go",
		Old:  "\t\tnext.NextAttemptUS = max(nowUS, cur.CompletedUS+everyUS)\n\t\treturn next, true\n",
		New:  "\t\tnext.NextAttemptUS = max(nowUS, cur.CompletedUS+everyUS)\n\t\tif cur.Refetch != archive.RefetchNone {\n\t\t\tnext.NextAttemptUS = nowUS\n\t\t}\n\t\treturn next, true\n",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestLiveHiddenDeleteSchedulesReplacement$"},
		},
	},
	{
		ID: "m243", Invariant: "H11",
		Name: "a fleet host whose announced rate limit is spent handed download workers (each of its repos waits for the reset holding one: a few such hosts hold every worker and every other host's repos wait)",
		File: "bootstrap/coordinator.go",
		Old:  "\t\t} else if wait := c.paceWait(head.host); wait > 0 {\n",
		New:  "\t\t} else if wait := c.paceWait(head.host); false && wait > 0 {\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetPacedHostHoldsNoWorker$"},
		},
	},
	{
		ID: "m244", Invariant: "E9",
		Name: "a retry of a download from a host whose announced budget is spent waits for the reset holding its worker (a host failing every attempt and announcing its budget spent holds each worker it gets for three resets)",
		File: "backfill/job.go",
		Old:  "\t\tif wait := r.hostPaceWait(req.Host); wait > r.o.BackoffMax || wait > 0 && res.Attempts > 0 {\n",
		New:  "\t\tif wait := r.hostPaceWait(req.Host); false && (wait > r.o.BackoffMax || wait > 0 && res.Attempts > 0) {\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetPacedHostHoldsNoWorker$"},
		},
	},
	{
		ID: "m245", Invariant: "H11",
		Name: "a parked host's queued repos counted as ready when the recorder is fed (the spent hosts' repos stop the recording: the other hosts' listed repos wait for their resets)",
		File: "bootstrap/coordinator.go",
		Old:  "len(c.queue) == 0 || c.ready.dispatchable() >= c.cfg.Workers {",
		New:  "len(c.queue) == 0 || c.ready.len() >= c.cfg.Workers {",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetPacedHostHoldsNoWorker$"},
		},
	},
	{
		ID: "m231", Invariant: "M3",
		Name: "a live or merged commit of an account whose snapshot held no record (no rev/) kept below that snapshot's rev (a commit captured before it, merged after it, brings back a record the account had deleted)",
		File: "archive/writer.go",
		Old:  "st.keep[i] = ev.Rev > held || (ev.Rev == cur",
		New:  "st.keep[i] = ev.Rev > cur || (ev.Rev == cur",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestMergeEmptySnapshotIsTheRatchet$"},
		},
	},
	{
		ID: "m232", Invariant: "G2 M8",
		Name: "an unknown account created pending by its commit's since while its #account after that commit in the same unit is not looked at (merged in one unit, an account deleted, taken down or deactivated is created active, to be replaced)",
		File: "archive/writer.go",
		Old:  "if j, ok := lastAccount[h.did]; ok && j > h.at {",
		New:  "if j, ok := lastAccount[h.did]; false && ok && j > h.at {",
		Tests: []Test{
			{Pkg: "./merge", Run: "^TestMergedHoleOfUnknownThenAccount$"},
		},
	},
	{
		ID: "m233", Invariant: "S9",
		Name: "a replacement of an account whose snapshot held no record (no rev/) checked against rev/ alone (an older copy applied over the newer, empty snapshot: its records come back)",
		File: "archive/writer.go",
		Old:  "held, _, err := w.heldRev(u.Replace.DID, cur)",
		New:  "held, _, err := cur, false, error(nil)",
		Tests: []Test{
			{Pkg: "./archive", Run: "^TestReplacementBelowEmptySnapshotIsStale$"},
		},
	},
	{
		ID: "m246", Invariant: "E10",
		Name: "a 429's server-directed wait not taken as the host's reset (a host answering every getRepo 429 with only a Retry-After is not seen spent: the fleet dispatcher keeps handing its repos to workers)",
		File: "upstream/hosts.go",
		Old:  "\tif status == http.StatusTooManyRequests {\n",
		New:  "\tif false && status == http.StatusTooManyRequests {\n",
		Tests: []Test{
			{Pkg: "./upstream", Run: "^TestPaceTakesA429sWait$"},
		},
	},
	{
		ID: "m247", Invariant: "E10",
		Name: "a getRepo asked of a host directly while its announced budget is spent asked anyway (before: waited for the reset inside the attempt deadline)",
		File: "upstream/hosts.go",
		Old:  "\tif wait := c.pace.tryAcquire(name); wait > 0 {\n",
		New:  "\tif wait := c.pace.tryAcquire(name); false && wait > 0 {\n",
		Tests: []Test{
			{Pkg: "./upstream", Run: "^TestDirectGetRepoPacedFailsAtOnce$"},
		},
	},
	{
		ID: "m248", Invariant: "H11",
		Name: "a direct download's 429 retried on the worker after its wait (13 hosts answering every getRepo 429 with Retry-After: 330, 30 or none hold all 100 workers of a fleet bootstrap for hours)",
		File: "backfill/job.go",
		Old:  "\t\t\tif req.Host != \"\" {\n",
		New:  "\t\t\tif false && req.Host != \"\" {\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobDirectRateLimitHoldsNoWorker$"},
			{Pkg: "./bootstrap", Run: "^TestFleetRateLimitedHostHoldsNoWorker$"},
		},
	},
	{
		ID: "m249", Invariant: "E10",
		Name: "a first attempt of a download from a host whose announced budget is spent waits for the reset holding its worker (a job handed out just before the announcement)",
		File: "backfill/job.go",
		Old:  "\t\tif wait := r.hostPaceWait(req.Host); wait > r.o.BackoffMax || wait > 0 && res.Attempts > 0 {\n",
		New:  "\t\tif wait := r.hostPaceWait(req.Host); wait > 0 && res.Attempts > 0 {\n",
		Tests: []Test{
			{Pkg: "./backfill", Run: "^TestJobDirectRateLimitHoldsNoWorker$"},
		},
	},
	{
		ID: "m250", Invariant: "E9",
		Name: "a retry of a direct download waits for its host's reset when it is at most a backoff step ahead (a host failing every attempt and announcing its budget spent 30 s ahead holds each worker it gets for three waits a repo)",
		File: "backfill/job.go",
		Old:  "\t\tif wait := r.hostPaceWait(req.Host); wait > r.o.BackoffMax || wait > 0 && res.Attempts > 0 {\n",
		New:  "\t\tif wait := r.hostPaceWait(req.Host); wait > r.o.BackoffMax {\n",
		Tests: []Test{
			{Pkg: "./bootstrap", Run: "^TestFleetPacedHostHoldsNoWorker$"},
		},
	},
	{
		ID: "m256", Invariant: "N3",
		Name: "a stream leader without a quorum of its replicas up taken for a leader (the node left up when two of three stop answers for the stream but stores nothing: the sink flips from no_leader to retrying on the ack timeout)",
		File: "natssink/publish.go",
		Old:  "\tcase info.Cluster != nil && (info.Cluster.Leader == \"\" || !quorate(info.Cluster)):\n",
		New:  "\tcase info.Cluster != nil && (info.Cluster.Leader == \"\"):\n",
		Tests: []Test{
			{Pkg: "./natssink", Run: "^TestSinkLeaderWithoutQuorum$"},
		},
	},
	{
		ID: "m251", Invariant: "G1",
		Name: "capture not told that bootstrap downloads begin without a position when its wait expires (a relay whose firehose is refused through bootstrap: the events between the downloads and the stream's join are lost, no gap)",
		File: "lifecycle/runner.go",
		Old:  "\t\tr.capture.Uncover()",
		New:  "\t\t_ = r.capture",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestRelayFirehoseDownThroughBootstrap$"},
		},
	},
	{
		ID: "m252", Invariant: "G1",
		Name: "the live consumer of a restart with no cursor/relay after a silent relay's bootstrap not uncovered (it joins the live tip: what changed while backstream was down is lost, no gap)",
		File: "lifecycle/runner.go",
		Old:  "if cursor == nil && (!r.captured || r.capOwing) {",
		New:  "if cursor == nil && r.capOwing {",
		Tests: []Test{
			{Pkg: "./node", Run: "^TestSilentRelayThenRestart$"},
		},
	},
	{
		ID: "m253", Invariant: "G1",
		Name: "a connection without a position dropped after the downloads began not taken for a hole (capture's redial joins the live tip, no gap)",
		File: "firehose/consumer.go",
		Old:  "if c.owes.Load() && ctx.Err() == nil { // dropped, not stopped",
		New:  "if false && c.owes.Load() && ctx.Err() == nil { // dropped, not stopped",
		Tests: []Test{
			{Pkg: "./firehose", Run: "^TestUncoverRecordsTheHole$"},
		},
	},
	{
		ID: "m254", Invariant: "G1",
		Name: "the hole capture found and did not record before it stopped not handed to the live consumer (it joins the live tip, no gap)",
		File: "lifecycle/runner.go",
		Old:  "r.capOwing = r.capOwing || r.capture.Owing()",
		New:  "r.capOwing = r.capOwing || false && r.capture.Owing()",
		Tests: []Test{
			{Pkg: "./lifecycle", Run: "^TestCaptureOwingHandedToLive$"},
		},
	},
	{
		ID: "m255", Invariant: "G1",
		Name: "capture of a restart in bootstrap after its wait expired not uncovered (the downloads before the restart covered by no position, no gap)",
		File: "lifecycle/runner.go",
		Old:  "if cursor == nil {\n\t\tif uncovered, err = r.relaySilent(); err != nil {",
		New:  "if false {\n\t\tif uncovered, err = r.relaySilent(); err != nil {",
		Tests: []Test{
			{Pkg: "./lifecycle", Run: "^TestRestartedCaptureRecordsTheHole$"},
		},
	},
}
