/work/main/target-old/release/deps/redlock_sim-b64d73c1841df974.d: sim/src/bin/redlock-sim.rs

/work/main/target-old/release/deps/redlock_sim-b64d73c1841df974: sim/src/bin/redlock-sim.rs

sim/src/bin/redlock-sim.rs:
