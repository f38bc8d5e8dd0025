//! Spec semantic 8: access from a thread-local destructor while the thread exits works (or panics
//! clearly), never undefined behaviour. Runs in a child process so that an abort is seen as a
//! failure of this test rather than of the whole test binary.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use ranklocal::{on_behalf_of, rank_local, RankId, RankLocal};

static OBJECT: RankLocal<AtomicUsize> = RankLocal::new();
rank_local! {
    static STATIC: AtomicUsize = AtomicUsize::new(0);
}

/// Touches everything the crate offers from inside a destructor, reporting what it saw.
struct TouchOnDrop {
    report: Option<mpsc::Sender<(RankId, usize, usize, bool)>>,
    delegate_to: Option<RankId>,
}

impl Drop for TouchOnDrop {
    fn drop(&mut self) {
        let me = RankId::this_thread();
        let a = OBJECT.get().fetch_add(1, Ordering::SeqCst) + 1;
        let b = STATIC.get().fetch_add(1, Ordering::SeqCst) + 1;
        let mut ok = RankId::current() == me && OBJECT.try_get().is_some();
        if let Some(r) = self.delegate_to {
            ok &= on_behalf_of(r, || RankId::current() == r && OBJECT.get_for(r).is_some());
        }
        if let Some(tx) = self.report.take() {
            let _ = tx.send((me, a, b, ok));
        }
    }
}

std::thread_local! {
    static EARLY: std::cell::RefCell<Option<TouchOnDrop>> = const { std::cell::RefCell::new(None) };
    static LATE: std::cell::RefCell<Option<TouchOnDrop>> = const { std::cell::RefCell::new(None) };
}

fn child() {
    let main_rank = RankId::current();
    OBJECT.get();
    let (tx, rx) = mpsc::channel();
    let mut handles = Vec::new();
    for variant in 0..3 {
        let tx = tx.clone();
        handles.push(std::thread::spawn(move || {
            let guard = TouchOnDrop {
                report: Some(tx),
                delegate_to: Some(main_rank),
            };
            match variant {
                // destructor registered before the thread has any rank or crate state
                0 => EARLY.with(|e| *e.borrow_mut() = Some(guard)),
                // registered after the thread used the crate (its own destructors come first)
                1 => {
                    OBJECT.get();
                    STATIC.get();
                    on_behalf_of(main_rank, || OBJECT.get());
                    LATE.with(|e| *e.borrow_mut() = Some(guard));
                }
                // both orders at once
                _ => {
                    EARLY.with(|e| *e.borrow_mut() = Some(guard));
                    OBJECT.get();
                    LATE.with(|e| {
                        *e.borrow_mut() = Some(TouchOnDrop {
                            report: None,
                            delegate_to: None,
                        })
                    });
                }
            }
        }));
    }
    drop(tx);
    for h in handles {
        h.join().unwrap();
    }
    let reports: Vec<_> = rx.iter().collect();
    assert_eq!(reports.len(), 3);
    for (rank, a, b, ok) in reports {
        assert!(ok, "{rank}: wrong rank or instance during teardown");
        assert!(a >= 1 && b >= 1);
    }
    println!("child ok");
}

#[test]
fn s8_access_from_a_thread_local_destructor_is_defined() {
    if std::env::var_os("RANKLOCAL_TEARDOWN_CHILD").is_some() {
        return child();
    }
    if cfg!(miri) {
        // Miri cannot spawn a process; run the body in-process instead.
        return child();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "s8_access_from_a_thread_local_destructor_is_defined",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RANKLOCAL_TEARDOWN_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("child ok"),
        "child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}
