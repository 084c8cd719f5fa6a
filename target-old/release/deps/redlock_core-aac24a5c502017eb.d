/work/main/target-old/release/deps/redlock_core-aac24a5c502017eb.d: core/src/lib.rs core/src/command/mod.rs core/src/command/fair.rs core/src/config/mod.rs core/src/config/addr.rs core/src/config/options.rs core/src/conn/mod.rs core/src/conn/open.rs core/src/conn/push.rs core/src/conn/scripts.rs core/src/conn/session.rs core/src/conn/sync.rs core/src/engine/mod.rs core/src/engine/dispatch.rs core/src/engine/lapse.rs core/src/engine/queue.rs core/src/engine/timers.rs core/src/engine/watch.rs core/src/error.rs core/src/event.rs core/src/eviction.rs core/src/forms.rs core/src/inspect.rs core/src/keepalive.rs core/src/lock.rs core/src/op/mod.rs core/src/op/acquire.rs core/src/op/attempt.rs core/src/op/extend.rs core/src/op/release.rs core/src/op/retry.rs core/src/op/verdict.rs core/src/random.rs core/src/round.rs core/src/rules.rs core/src/script.rs core/src/stats.rs core/src/time.rs core/src/token.rs core/src/scripts/acquire.lua core/src/scripts/release.lua core/src/scripts/extend.lua core/src/scripts/fence.lua core/src/scripts/ring.lua core/src/scripts/wait.lua core/src/scripts/claim.lua core/src/scripts/handoff.lua core/src/scripts/leave.lua core/src/scripts/enter.lua

/work/main/target-old/release/deps/libredlock_core-aac24a5c502017eb.rlib: core/src/lib.rs core/src/command/mod.rs core/src/command/fair.rs core/src/config/mod.rs core/src/config/addr.rs core/src/config/options.rs core/src/conn/mod.rs core/src/conn/open.rs core/src/conn/push.rs core/src/conn/scripts.rs core/src/conn/session.rs core/src/conn/sync.rs core/src/engine/mod.rs core/src/engine/dispatch.rs core/src/engine/lapse.rs core/src/engine/queue.rs core/src/engine/timers.rs core/src/engine/watch.rs core/src/error.rs core/src/event.rs core/src/eviction.rs core/src/forms.rs core/src/inspect.rs core/src/keepalive.rs core/src/lock.rs core/src/op/mod.rs core/src/op/acquire.rs core/src/op/attempt.rs core/src/op/extend.rs core/src/op/release.rs core/src/op/retry.rs core/src/op/verdict.rs core/src/random.rs core/src/round.rs core/src/rules.rs core/src/script.rs core/src/stats.rs core/src/time.rs core/src/token.rs core/src/scripts/acquire.lua core/src/scripts/release.lua core/src/scripts/extend.lua core/src/scripts/fence.lua core/src/scripts/ring.lua core/src/scripts/wait.lua core/src/scripts/claim.lua core/src/scripts/handoff.lua core/src/scripts/leave.lua core/src/scripts/enter.lua

/work/main/target-old/release/deps/libredlock_core-aac24a5c502017eb.rmeta: core/src/lib.rs core/src/command/mod.rs core/src/command/fair.rs core/src/config/mod.rs core/src/config/addr.rs core/src/config/options.rs core/src/conn/mod.rs core/src/conn/open.rs core/src/conn/push.rs core/src/conn/scripts.rs core/src/conn/session.rs core/src/conn/sync.rs core/src/engine/mod.rs core/src/engine/dispatch.rs core/src/engine/lapse.rs core/src/engine/queue.rs core/src/engine/timers.rs core/src/engine/watch.rs core/src/error.rs core/src/event.rs core/src/eviction.rs core/src/forms.rs core/src/inspect.rs core/src/keepalive.rs core/src/lock.rs core/src/op/mod.rs core/src/op/acquire.rs core/src/op/attempt.rs core/src/op/extend.rs core/src/op/release.rs core/src/op/retry.rs core/src/op/verdict.rs core/src/random.rs core/src/round.rs core/src/rules.rs core/src/script.rs core/src/stats.rs core/src/time.rs core/src/token.rs core/src/scripts/acquire.lua core/src/scripts/release.lua core/src/scripts/extend.lua core/src/scripts/fence.lua core/src/scripts/ring.lua core/src/scripts/wait.lua core/src/scripts/claim.lua core/src/scripts/handoff.lua core/src/scripts/leave.lua core/src/scripts/enter.lua

core/src/lib.rs:
core/src/command/mod.rs:
core/src/command/fair.rs:
core/src/config/mod.rs:
core/src/config/addr.rs:
core/src/config/options.rs:
core/src/conn/mod.rs:
core/src/conn/open.rs:
core/src/conn/push.rs:
core/src/conn/scripts.rs:
core/src/conn/session.rs:
core/src/conn/sync.rs:
core/src/engine/mod.rs:
core/src/engine/dispatch.rs:
core/src/engine/lapse.rs:
core/src/engine/queue.rs:
core/src/engine/timers.rs:
core/src/engine/watch.rs:
core/src/error.rs:
core/src/event.rs:
core/src/eviction.rs:
core/src/forms.rs:
core/src/inspect.rs:
core/src/keepalive.rs:
core/src/lock.rs:
core/src/op/mod.rs:
core/src/op/acquire.rs:
core/src/op/attempt.rs:
core/src/op/extend.rs:
core/src/op/release.rs:
core/src/op/retry.rs:
core/src/op/verdict.rs:
core/src/random.rs:
core/src/round.rs:
core/src/rules.rs:
core/src/script.rs:
core/src/stats.rs:
core/src/time.rs:
core/src/token.rs:
core/src/scripts/acquire.lua:
core/src/scripts/release.lua:
core/src/scripts/extend.lua:
core/src/scripts/fence.lua:
core/src/scripts/ring.lua:
core/src/scripts/wait.lua:
core/src/scripts/claim.lua:
core/src/scripts/handoff.lua:
core/src/scripts/leave.lua:
core/src/scripts/enter.lua:
