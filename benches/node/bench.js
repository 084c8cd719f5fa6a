// node-redlock as a peer in the benchmark table: `callers` concurrent loops of lock+unlock
// pairs on fresh resources for `seconds`, after a short warm-up, on one Redlock instance over
// one ioredis connection per master. Prints, for benches/table.rs to read:
//   line 1: pairs and the measured nanoseconds; line 2: pair latencies (ns); line 3: lock
//   latencies (ns).
// Run: node bench.js --callers 16 --seconds 2 --nodes 127.0.0.1:7001,127.0.0.1:7002,...
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

const callers = Number(arg('--callers', '1'));
const seconds = Number(arg('--seconds', '2'));
const nodes = arg('--nodes', '').split(',').filter(Boolean);
const TTL = 10000;

async function main() {
  const clients = nodes.map((a) => {
    const [host, port] = a.split(':');
    return new Redis({ host, port: Number(port), lazyConnect: true, maxRetriesPerRequest: 1 });
  });
  await Promise.all(clients.map((c) => c.connect()));
  // One round, no retries: a fresh resource is always free.
  const redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
  const now = () => process.hrtime.bigint();
  let tag = 0;

  async function run(ms, record) {
    const end = now() + BigInt(Math.round(ms * 1e6));
    const pair = [];
    const lock = [];
    let pairs = 0;
    const run = tag++;
    const start = now();
    await Promise.all(Array.from({ length: callers }, async (_, t) => {
      for (let i = 0; now() < end; i++) {
        const t0 = now();
        const l = await redlock.lock(`table:node:${process.pid}:${run}:${t}:${i}`, TTL);
        const t1 = now();
        await l.unlock();
        const t2 = now();
        pairs++;
        if (record) {
          lock.push(t1 - t0);
          pair.push(t2 - t0);
        }
      }
    }));
    return { pairs, busy: now() - start, pair, lock };
  }

  await run(200, false);
  const r = await run(seconds * 1000, true);
  process.stdout.write(`${r.pairs} ${r.busy}\n${r.pair.join(' ')}\n${r.lock.join(' ')}\n`);
  await Promise.all(clients.map((c) => c.quit()));
}

main().catch((e) => {
  console.error(`node-redlock bench: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
