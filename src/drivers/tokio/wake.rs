//! One waker per node, so that the driver task knows which sockets have news.
//!
//! The driver task has one waker; had it registered that one with every socket, each wake-up
//! would have to ask every socket again whether it is ready (a registration check that costs
//! more than the read it guards). Instead each node's socket is polled with a waker of its
//! own that notes the node, then wakes the task: a pass polls the nodes that were noted, those
//! with bytes to write, and those not yet registered, and leaves the rest alone. What
//! `FuturesUnordered` does for futures, for sockets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// A node's waker: notes the node, then wakes the task.
#[derive(Debug)]
struct NodeWake {
    /// Set by a wake-up, taken by the driver's pass.
    woke: AtomicBool,
    task: Waker,
}

impl Wake for NodeWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woke.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

/// One node's side: the flag to read and the waker to poll with.
#[derive(Debug)]
pub(super) struct Node {
    wake: Arc<NodeWake>,
    waker: Waker,
}

impl Node {
    /// Whether the node was woken since the last call (and forgets it).
    pub(super) fn take(&self) -> bool {
        // A plain load first: most passes find most nodes quiet, and a load is cheaper than a
        // swap.
        self.wake.woke.load(Ordering::Acquire) && self.wake.woke.swap(false, Ordering::Acquire)
    }

    /// The waker to poll this node's socket with.
    pub(super) fn waker(&self) -> &Waker {
        &self.waker
    }
}

/// Every node's waker, made for one task waker.
#[derive(Debug, Clone)]
pub(super) struct NodeWakers {
    nodes: Arc<[Node]>,
    task: Waker,
}

impl NodeWakers {
    /// Wakers for `n` nodes, each already noted (nothing is registered yet).
    pub(super) fn new(n: usize, task: &Waker) -> NodeWakers {
        let nodes = (0..n)
            .map(|_| {
                let wake = Arc::new(NodeWake {
                    woke: AtomicBool::new(true),
                    task: task.clone(),
                });
                Node {
                    waker: Waker::from(wake.clone()),
                    wake,
                }
            })
            .collect();
        NodeWakers {
            nodes,
            task: task.clone(),
        }
    }

    /// Whether these wakers wake `task`. When a task is polled with another waker, new ones
    /// are made, every node noted, so that each socket registers again with a waker that
    /// reaches the task.
    pub(super) fn wakes(&self, task: &Waker) -> bool {
        self.task.will_wake(task)
    }

    /// Node `i`'s side.
    #[cfg(test)]
    fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Every node's side, in node order (shared: a pass holds them while it changes the
    /// driver).
    pub(super) fn nodes(&self) -> Arc<[Node]> {
        self.nodes.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_node_waker_notes_its_node_and_wakes_the_task() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let w = NodeWakers::new(3, &task);
        // New wakers start noted: every socket is polled once to register.
        assert!((0..3).all(|i| w.node(i).take()));
        assert!((0..3).all(|i| !w.node(i).take()));
        w.node(1).waker().wake_by_ref();
        // By value, as tokio wakes a registered waker it takes back.
        let taken = w.node(1).waker().clone();
        taken.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert!(!w.node(0).take());
        assert!(w.node(1).take());
        assert!(!w.node(1).take(), "a note is taken once");
        assert!(!w.node(2).take());
        assert!(w.wakes(&task));
        let other = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        assert!(!w.wakes(&other));
    }
}
