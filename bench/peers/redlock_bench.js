#!/usr/bin/env node
// node-redlock (npm redlock 4.2.0, on ioredis) through dmutex-bench's
// scenarios 2 and 4:
//
//     node redlock_bench.js URL uncontended ITERATIONS
//     node redlock_bench.js URL handoff PROCS SECONDS
//
// Prints the line protocol of bench/peers.c.  Redlock is used as its users
// would: one server, its defaults (retryDelay 200 ms, retryJitter 100 ms),
// except retryCount -1 so that lock() blocks like the others instead of
// failing after 10 tries; a 10 s lease, like dmutex's default.
//
// Handoff: each process records, for every hold, when its lock() resolved
// and when it called unlock(), on CLOCK_MONOTONIC (process.hrtime), the
// clock dmutex-bench uses.  Holds do not overlap, so sorted by lock time
// they are the order of the holds; a handoff is a hold whose process
// differs from the previous one, from that one's unlock call to this lock's
// return.
'use strict';

const { fork } = require('child_process');
const Redis = require('ioredis');
const Redlock = require('redlock');

const LEASE_MS = 10000;

const now = () => Number(process.hrtime.bigint());

function pct(values, p) {
	if (!values.length)
		return NaN;
	const v = Float64Array.from(values).sort();
	return v[Math.max(1, Math.ceil(p / 100 * v.length)) - 1];
}

function open(url) {
	const client = new Redis(url, { lazyConnect: false });
	return { client, redlock: new Redlock([client], { retryCount: -1 }) };
}

async function uncontended(url, name, iters) {
	const { client, redlock } = open(url);
	const warm = Math.floor(iters / 10), samples = [];
	for (let i = 0; i < iters + warm; i++) {
		const t0 = now();
		const lock = await redlock.lock(name, LEASE_MS);
		await lock.unlock();
		const t1 = now();
		if (i >= warm)
			samples.push(t1 - t0);
	}
	client.disconnect();
	return [pct(samples, 50), pct(samples, 99)];
}

async function child(url, name) {
	const { client, redlock } = open(url);
	await client.ping();
	const stop = await new Promise((resolve) => {
		process.once('message', (m) => resolve(m.stop));
		process.send({ ready: true });
	});
	const holds = [];
	while (now() < stop) {
		const lock = await redlock.lock(name, LEASE_MS);
		const tLock = now();
		const tUnlock = now();
		await lock.unlock();
		holds.push(tLock, tUnlock);
	}
	client.disconnect();
	process.send({ holds }, () => process.exit(0));
}

function handoff(url, name, procs, secs) {
	return new Promise((resolve, reject) => {
		const kids = [], results = new Array(procs);
		let ready = 0, done = 0;
		for (let p = 0; p < procs; p++) {
			const k = fork(__filename, ['--child', url, name]);
			k.on('message', (m) => {
				if (m.ready && ++ready === procs) {
					const stop = now() + secs * 1e9;
					for (const c of kids)
						c.send({ stop });
				} else if (m.holds) {
					results[p] = m.holds;
					if (++done === procs)
						resolve(summarise(results, procs));
				}
			});
			k.on('exit', (code) => {
				if (code !== 0)
					reject(new Error(`a process failed: ${code}`));
			});
			kids.push(k);
		}
	});
}

function summarise(results, procs) {
	const holds = [], counts = [];
	results.forEach((h, p) => {
		counts.push(h.length / 2);
		for (let i = 0; i < h.length; i += 2)
			holds.push([h[i], h[i + 1], p]);
	});
	holds.sort((a, b) => a[0] - b[0]);
	const lat = [];
	let overlaps = 0;
	for (let i = 1; i < holds.length; i++) {
		if (holds[i][0] < holds[i - 1][1])
			overlaps++;
		if (holds[i][2] !== holds[i - 1][2])
			lat.push(holds[i][0] - holds[i - 1][1]);
	}
	if (overlaps)
		console.log(`error mutual exclusion violated: ${overlaps} overlapping holds`);
	const total = holds.length;
	const span = total > 1 ? holds[total - 1][1] - holds[0][0] : NaN;
	return [procs, total > 1 ? (total - 1) / span * 1e9 : 0, pct(lat, 50), pct(lat, 99),
		total ? Math.min(...counts) / total : 0, total ? Math.max(...counts) / total : 0];
}

async function main() {
	const argv = process.argv.slice(2);
	if (argv[0] === '--child')
		return child(argv[1], argv[2]);
	const [url, what] = argv;
	if (!((argv.length === 3 && what === 'uncontended') || (argv.length === 4 && what === 'handoff'))) {
		console.error('usage: redlock_bench.js URL uncontended ITERATIONS\n' +
			'       redlock_bench.js URL handoff PROCS SECONDS');
		process.exit(2);
	}
	const base = `peer-js${process.pid}`;
	const ver = (m) => require(`${m}/package.json`).version;
	console.log(`name node-redlock ${ver('redlock')} (ioredis ${ver('ioredis')})`);
	if (what === 'uncontended') {
		const [med, p99] = await uncontended(url, `${base}:uncontended`, Number(argv[2]));
		console.log(`uncontended ${med.toFixed(0)} ${p99.toFixed(0)}`);
		return;
	}
	const h = await handoff(url, `${base}:handoff`, Number(argv[2]), Number(argv[3]));
	console.log(`handoff ${h[0]} ${h[1].toFixed(1)} ${h[2].toFixed(0)} ${h[3].toFixed(0)} ` +
		`${h[4].toFixed(4)} ${h[5].toFixed(4)}`);
}

main().catch((e) => {
	console.log(`error ${e.message}`);
	process.exit(1);
});
