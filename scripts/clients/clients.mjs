// clients.mjs: two npm Jetstream clients, unchanged, read a backstream
// archive and report what they saw as JSON (OUT). Run by
// oracle/clients (build tag npmclients) through scripts/test-clients.sh.
//
//   URL      http://host:port of backstream's public listener
//   EXPECT   events a Jetstream v1 client must receive from the start
//   OUT      where to write the report
//   RESTARTS how many times @skyware/jetstream is stopped and restarted from
//            its own time_us cursor during its replay (default 8)
//
// @atcute/jetstream replays from cursor 0 with its schema validation on and
// counts every validation error. @skyware/jetstream starts at seq 1 (it
// treats cursor 0 as "live") and is stopped every EXPECT/RESTARTS events and
// started again with the cursor it kept (the last time_us it saw), as an
// application that persists it does. The first event after a restart may be
// the one it saw last: Jetstream's time cursor is inclusive, so that one
// event comes again (counted as resent); any other event received twice
// (same archive seq, the "cursor" field) is a duplicate. Both fold their commits
// (create/update set, delete removes, an account deleted or taken down
// clears it: its content is no longer redistributed), which
// the Go side compares with the simulated network's records.

import { writeFileSync } from 'node:fs';
import { JetstreamSubscription } from '@atcute/jetstream';
import { Jetstream } from '@skyware/jetstream';
import WebSocket from 'ws';

const url = process.env.URL;
const expect = Number(process.env.EXPECT);
const out = process.env.OUT;
const restarts = Number(process.env.RESTARTS || 8);
const deadlineMs = Number(process.env.DEADLINE_MS || 300_000);
if (!url || !(expect > 0) || !out) {
	console.error('clients.mjs: URL, EXPECT and OUT are required');
	process.exit(2);
}

function apply(fold, ev) {
	if (ev.kind === 'commit' && ev.commit) {
		const recs = (fold[ev.did] ??= {});
		const path = ev.commit.collection + '/' + ev.commit.rkey;
		if (ev.commit.operation === 'delete') {
			delete recs[path];
		} else {
			recs[path] = ev.commit.cid;
		}
	} else if (ev.kind === 'account' && (ev.account?.status === 'deleted' || ev.account?.status === 'takendown')) {
		fold[ev.did] = {};
	}
}

function withDeadline(name, run) {
	return new Promise((resolve) => {
		const state = { timedOut: false };
		const timer = setTimeout(() => {
			state.timedOut = true;
			resolve({ name, timedOut: true, ...state.partial() });
		}, deadlineMs);
		run(state).then((r) => {
			clearTimeout(timer);
			if (!state.timedOut) resolve({ name, timedOut: false, ...r });
		});
	});
}

// atcute: one full replay from cursor 0, validation on.
function atcute() {
	return withDeadline('@atcute/jetstream', async (state) => {
		const fold = {};
		const errors = [];
		const kinds = {};
		let events = 0;
		state.partial = () => ({ events, errors: errors.length, errorSamples: errors.slice(0, 5), kinds, fold });
		const sub = new JetstreamSubscription({
			url: url.replace(/^http/, 'ws'),
			cursor: 0,
			ws: { WebSocket },
			onError: (err) => {
				errors.push(String(err?.message ?? err).slice(0, 300));
			},
		});
		if (events + errors.length < expect) {
			for await (const ev of sub) {
				events++;
				kinds[ev.kind] = (kinds[ev.kind] ?? 0) + 1;
				apply(fold, ev);
				if (events + errors.length >= expect || state.timedOut) break;
			}
		}
		return state.partial();
	});
}

// skyware: a replay from seq 1, stopped and resumed from its own time_us
// cursor RESTARTS times.
function skyware() {
	return withDeadline('@skyware/jetstream', async (state) => {
		const fold = {};
		const seen = new Set();
		let events = 0;
		let duplicates = 0;
		let resent = 0;
		let starts = 0;
		const dupSamples = [];
		let cursor = 1;
		const chunk = Math.max(1, Math.ceil(expect / (restarts + 1)));
		state.partial = () => ({ events, unique: seen.size, duplicates, resent, dupSamples, starts, fold });
		while (seen.size < expect && !state.timedOut) {
			starts++;
			const startedAt = cursor;
			cursor = await new Promise((resolve) => {
				const js = new Jetstream({ ws: WebSocket, endpoint: url.replace(/^http/, 'ws') + '/subscribe', cursor: startedAt });
				let n = 0;
				let done = false;
				const onEvent = (ev) => {
					if (done) return; // after our close: the next start resumes from the cursor kept below
					events++;
					n++;
					if (seen.has(ev.cursor) && n === 1 && ev.time_us === startedAt) {
						resent++; // Jetstream's inclusive time cursor: the event at the cursor comes again, once
					} else if (seen.has(ev.cursor)) {
						duplicates++;
						if (dupSamples.length < 5) dupSamples.push({ seq: ev.cursor, time_us: ev.time_us, resumedAt: startedAt });
					} else {
						seen.add(ev.cursor);
						apply(fold, ev);
					}
					if (n >= chunk || seen.size >= expect) {
						done = true;
						const keep = js.cursor; // the time_us of this event: what an application persists
						js.close();
						resolve(keep);
					}
				};
				js.on('commit', onEvent);
				js.on('account', onEvent);
				js.on('identity', onEvent);
				js.start();
			});
		}
		return state.partial();
	});
}

const [a, s] = await Promise.all([atcute(), skyware()]);
writeFileSync(out, JSON.stringify({ atcute: a, skyware: s }));
console.log(`@atcute/jetstream: ${a.events} events, ${a.errors} validation errors${a.timedOut ? ' (TIMED OUT)' : ''}`);
console.log(`@skyware/jetstream: ${s.unique} distinct events in ${s.starts} starts, ${s.duplicates} duplicates, ${s.resent} resent at the inclusive cursor${s.timedOut ? ' (TIMED OUT)' : ''}`);
process.exit(0);
