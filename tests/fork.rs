//! Tokens stay unique across `fork()`: a pre-forking server whose parent drew a token before
//! forking must not hand parent and child the same tokens (the child's clean-up release after
//! a failed acquire would then delete the parent's keys).
//!
//! Its own test binary, with one test, so that the fork happens with no other test's thread
//! holding a lock the child might need (the child only draws tokens and writes to a pipe).

// fork(2), pipe(2) and their kin are only reachable through libc.
#![allow(unsafe_code)]

use redlock_mux::{OsRandom, Token};

const DRAWS: usize = 16;

#[test]
fn tokens_drawn_after_a_fork_differ_between_parent_and_child() {
    // A draw before the fork, as a parent that locked something before forking would make:
    // any per-thread generator state is initialised now, and copied by the fork.
    let _ = Token::from_random(&mut OsRandom);
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe(2) writes two descriptors into the array it is given, which has room for
    // exactly two.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the child runs only async-signal-safe code until it calls _exit: it draws
    // tokens (a getrandom system call and hex formatting into a stack array, no allocation,
    // no lock), writes them with write(2), and exits with _exit(2) without unwinding or
    // running destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let mut out = [0u8; DRAWS * Token::LEN];
        for chunk in out.chunks_exact_mut(Token::LEN) {
            chunk.copy_from_slice(Token::from_random(&mut OsRandom).as_bytes());
        }
        // SAFETY: writes `out.len()` bytes from a live stack array to our own pipe, then ends
        // the child at once.
        unsafe {
            let n = libc::write(wr, out.as_ptr().cast(), out.len());
            libc::_exit(if n == out.len() as isize { 0 } else { 1 });
        }
    }
    // SAFETY: closes the parent's copy of the write end, which it does not use.
    unsafe { libc::close(wr) };
    let parent: Vec<Token> = (0..DRAWS)
        .map(|_| Token::from_random(&mut OsRandom))
        .collect();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // SAFETY: reads at most `chunk.len()` bytes into a live stack array.
        let n = unsafe { libc::read(rd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n <= 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: waits for our own child, writing its status into a live integer; closes our
    // read end, which is not used after this.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
        libc::close(rd);
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: {status}"
    );
    assert_eq!(buf.len(), DRAWS * Token::LEN, "the child's tokens");
    let child: Vec<Token> = buf
        .chunks_exact(Token::LEN)
        .map(|c| Token::parse(std::str::from_utf8(c).unwrap()).unwrap())
        .collect();
    let shared: Vec<&Token> = child.iter().filter(|t| parent.contains(t)).collect();
    assert!(
        shared.is_empty(),
        "{} of {DRAWS} tokens drawn after the fork are the same in parent and child: {shared:?}",
        shared.len()
    );
}
