// node-redlock under contention, for benches/contention.rs: `clients` loops, each with its own
// Redlock instance over its own ioredis connections (as separate processes would have), lock
// one resource (node-redlock's own retries: retry delay 200 ms, jitter 200 ms), hold, unlock,
// then spend `think` ms outside the lock, for `seconds`. Prints one line per tenure:
//   holder acquired_ns released_ns   (nanoseconds since the start)
// Run: node contend.js --clients 8 --seconds 3 --hold-ms 1 --think-ms 1 --nodes 127.0.0.1:7001,...
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

const clients = Number(arg('--clients', '2'));
const seconds = Number(arg('--seconds', '3'));
const hold = Number(arg('--hold-ms', '1'));
const think = Number(arg('--think-ms', '1'));
const nodes = arg('--nodes', '').split(',').filter(Boolean);
const RESOURCE = 'bench:contended:node';
const TTL = 10000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const conns = [];
  const locks = [];
  for (let c = 0; c < clients; c++) {
    const mine = nodes.map((a) => {
      const [host, port] = a.split(':');
      return new Redis({ host, port: Number(port), lazyConnect: true, maxRetriesPerRequest: 1 });
    });
    await Promise.all(mine.map((r) => r.connect()));
    conns.push(...mine);
    locks.push(new Redlock(mine, { retryCount: 1000000, driftFactor: 0.01 }));
  }
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(seconds * 1e9));
  const now = () => process.hrtime.bigint();
  const out = [];
  await Promise.all(locks.map(async (redlock, holder) => {
    while (now() < end) {
      let l;
      try {
        l = await redlock.lock(RESOURCE, TTL);
      } catch (e) {
        continue;
      }
      const acquired = now() - start;
      await sleep(hold);
      const released = now() - start;
      await l.unlock().catch(() => {});
      out.push(`${holder} ${acquired} ${released}`);
      await sleep(think);
    }
  }));
  process.stdout.write(out.join('\n') + '\n');
  await Promise.all(conns.map((c) => c.quit()));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
