/work/main/target-old/release/deps/redlock_sim-48f4242122e5b78e.d: sim/src/lib.rs sim/src/check.rs sim/src/fairness.rs sim/src/master/mod.rs sim/src/master/commands.rs sim/src/master/conn.rs sim/src/master/fair_scripts.rs sim/src/master/keyspace.rs sim/src/master/pubsub.rs sim/src/master/reply.rs sim/src/master/scripts.rs sim/src/master/session.rs sim/src/master/strings.rs sim/src/master/zset.rs sim/src/profile.rs sim/src/rng.rs sim/src/run.rs sim/src/scripts.rs sim/src/sha1.rs sim/src/trace.rs sim/src/world/mod.rs sim/src/world/client.rs sim/src/world/client/clock.rs sim/src/world/client/guard.rs sim/src/world/client/ops.rs sim/src/world/client/owed.rs sim/src/world/client/pump.rs sim/src/world/client/step.rs sim/src/world/faults.rs sim/src/world/liveness.rs sim/src/world/names.rs sim/src/world/net.rs sim/src/world/params.rs sim/src/world/queue.rs sim/src/world/setup.rs

/work/main/target-old/release/deps/libredlock_sim-48f4242122e5b78e.rlib: sim/src/lib.rs sim/src/check.rs sim/src/fairness.rs sim/src/master/mod.rs sim/src/master/commands.rs sim/src/master/conn.rs sim/src/master/fair_scripts.rs sim/src/master/keyspace.rs sim/src/master/pubsub.rs sim/src/master/reply.rs sim/src/master/scripts.rs sim/src/master/session.rs sim/src/master/strings.rs sim/src/master/zset.rs sim/src/profile.rs sim/src/rng.rs sim/src/run.rs sim/src/scripts.rs sim/src/sha1.rs sim/src/trace.rs sim/src/world/mod.rs sim/src/world/client.rs sim/src/world/client/clock.rs sim/src/world/client/guard.rs sim/src/world/client/ops.rs sim/src/world/client/owed.rs sim/src/world/client/pump.rs sim/src/world/client/step.rs sim/src/world/faults.rs sim/src/world/liveness.rs sim/src/world/names.rs sim/src/world/net.rs sim/src/world/params.rs sim/src/world/queue.rs sim/src/world/setup.rs

/work/main/target-old/release/deps/libredlock_sim-48f4242122e5b78e.rmeta: sim/src/lib.rs sim/src/check.rs sim/src/fairness.rs sim/src/master/mod.rs sim/src/master/commands.rs sim/src/master/conn.rs sim/src/master/fair_scripts.rs sim/src/master/keyspace.rs sim/src/master/pubsub.rs sim/src/master/reply.rs sim/src/master/scripts.rs sim/src/master/session.rs sim/src/master/strings.rs sim/src/master/zset.rs sim/src/profile.rs sim/src/rng.rs sim/src/run.rs sim/src/scripts.rs sim/src/sha1.rs sim/src/trace.rs sim/src/world/mod.rs sim/src/world/client.rs sim/src/world/client/clock.rs sim/src/world/client/guard.rs sim/src/world/client/ops.rs sim/src/world/client/owed.rs sim/src/world/client/pump.rs sim/src/world/client/step.rs sim/src/world/faults.rs sim/src/world/liveness.rs sim/src/world/names.rs sim/src/world/net.rs sim/src/world/params.rs sim/src/world/queue.rs sim/src/world/setup.rs

sim/src/lib.rs:
sim/src/check.rs:
sim/src/fairness.rs:
sim/src/master/mod.rs:
sim/src/master/commands.rs:
sim/src/master/conn.rs:
sim/src/master/fair_scripts.rs:
sim/src/master/keyspace.rs:
sim/src/master/pubsub.rs:
sim/src/master/reply.rs:
sim/src/master/scripts.rs:
sim/src/master/session.rs:
sim/src/master/strings.rs:
sim/src/master/zset.rs:
sim/src/profile.rs:
sim/src/rng.rs:
sim/src/run.rs:
sim/src/scripts.rs:
sim/src/sha1.rs:
sim/src/trace.rs:
sim/src/world/mod.rs:
sim/src/world/client.rs:
sim/src/world/client/clock.rs:
sim/src/world/client/guard.rs:
sim/src/world/client/ops.rs:
sim/src/world/client/owed.rs:
sim/src/world/client/pump.rs:
sim/src/world/client/step.rs:
sim/src/world/faults.rs:
sim/src/world/liveness.rs:
sim/src/world/names.rs:
sim/src/world/net.rs:
sim/src/world/params.rs:
sim/src/world/queue.rs:
sim/src/world/setup.rs:
