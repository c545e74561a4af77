use super::*;

fn root() -> MqCaller {
    MqCaller {
        pid: 1,
        dac_override: true,
        fowner: true,
        sys_resource: true,
        msgqueue_limit: u64::MAX,
        ..MqCaller::default()
    }
}

fn user(uid: u32) -> MqCaller {
    MqCaller {
        pid: 2,
        uid,
        fsuid: uid,
        fsgid: uid,
        msgqueue_limit: 819200,
        ..MqCaller::default()
    }
}

fn attr(maxmsg: i64, msgsize: i64) -> Option<MqAttr> {
    Some(MqAttr {
        maxmsg,
        msgsize,
        ..MqAttr::default()
    })
}

fn send(q: &MessageQueue, prio: u32, text: &[u8]) -> Result<Option<Fired>, Errno> {
    q.send(prio, text.to_vec(), true, None, &root(), || false)
}

fn recv(q: &MessageQueue) -> Result<(u32, Vec<u8>), Errno> {
    q.receive(true, None, || false)
}

#[test]
fn names_and_creation() {
    let ns = MqNamespace::default();
    let creat = libc::O_CREAT | libc::O_RDWR;
    assert_eq!(
        ns.open(b"", creat, 0o600, None, &root()).err(),
        Some(Errno::ENOENT)
    );
    assert_eq!(
        ns.open(b"a/b", creat, 0o600, None, &root()).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(
        ns.open(&[b'a'; 256], creat, 0o600, None, &root()).err(),
        Some(Errno::ENAMETOOLONG)
    );
    assert!(ns.open(&[b'a'; 255], creat, 0o600, None, &root()).is_ok());
    assert_eq!(
        ns.open(b"q", libc::O_RDWR, 0, None, &root()).err(),
        Some(Errno::ENOENT)
    );
    let q = ns.open(b"q", creat, 0o640, None, &root()).unwrap();
    assert_eq!(q.limits(), (10, 8192));
    assert_eq!(
        ns.open(b"q", creat | libc::O_EXCL, 0o600, None, &root())
            .err(),
        Some(Errno::EEXIST)
    );
    // Another user may not read a 0640 queue of root's.
    assert_eq!(
        ns.open(b"q", libc::O_RDONLY, 0, None, &user(1000)).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(
        ns.open(b"q", libc::O_WRONLY | libc::O_RDWR, 0, None, &root())
            .err(),
        Some(Errno::EINVAL)
    );
    // Attributes: positive, within msg_max and msgsize_max without CAP_SYS_RESOURCE.
    let u = user(1000);
    for (m, s) in [(0, 10), (10, 0), (11, 10), (10, 8193)] {
        assert_eq!(
            ns.open(b"bad", creat, 0o600, attr(m, s), &u).err(),
            Some(Errno::EINVAL)
        );
    }
    assert!(ns
        .open(b"big", creat, 0o600, attr(20, 16384), &root())
        .is_ok());
    // RLIMIT_MSGQUEUE: EMFILE past it.
    let mut poor = user(1001);
    poor.msgqueue_limit = 1000;
    assert_eq!(
        ns.open(b"p", creat, 0o600, attr(10, 100), &poor).err(),
        Some(Errno::EMFILE)
    );
    // queues_max: ENOSPC without CAP_SYS_RESOURCE.
    let count = ns.queue_count();
    ns.set_limits(MqLimits {
        queues_max: count,
        ..MqLimits::default()
    });
    assert_eq!(
        ns.open(b"n", creat, 0o600, None, &u).err(),
        Some(Errno::ENOSPC)
    );
    // Unlinking: only the owner; the queue lives while held.
    assert_eq!(ns.unlink(b"q", &u), Err(Errno::EACCES));
    ns.unlink(b"q", &root()).unwrap();
    assert_eq!(ns.unlink(b"q", &root()), Err(Errno::ENOENT));
    assert_eq!(ns.queue_count(), count);
    drop(q);
    assert_eq!(ns.queue_count(), count - 1);
}

#[test]
fn priorities_order_messages() {
    let ns = MqNamespace::default();
    let q = ns
        .open(
            b"p",
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            attr(4, 16),
            &root(),
        )
        .unwrap();
    send(&q, 1, b"one-a").unwrap();
    send(&q, 5, b"five").unwrap();
    send(&q, 1, b"one-b").unwrap();
    send(&q, 3, b"three").unwrap();
    assert_eq!(send(&q, 0, b"full"), Err(Errno::EAGAIN));
    assert_eq!(send(&q, 0, &[0; 17]), Err(Errno::EMSGSIZE));
    assert_eq!(q.attr().curmsgs, 4);
    assert!(q.status_line().starts_with(b"QSIZE:19 "));
    let got: Vec<(u32, Vec<u8>)> = (0..4).map(|_| recv(&q).unwrap()).collect();
    assert_eq!(
        got,
        [
            (5, b"five".to_vec()),
            (3, b"three".to_vec()),
            (1, b"one-a".to_vec()),
            (1, b"one-b".to_vec())
        ]
    );
    assert_eq!(recv(&q), Err(Errno::EAGAIN));
    // A deadline already past: ETIMEDOUT on the empty queue.
    let past = Some(SystemTime::UNIX_EPOCH);
    assert_eq!(q.receive(false, past, || false), Err(Errno::ETIMEDOUT));
    assert_eq!(q.receive(false, None, || true), Err(Errno::EINTR));
}

#[test]
fn waiters_are_served_in_turn() {
    let ns = MqNamespace::default();
    let q = ns
        .open(
            b"w",
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            attr(1, 16),
            &root(),
        )
        .unwrap();
    q.notify(
        1,
        Some(Notify::Signal {
            signo: 10,
            value: 7,
        }),
        |_| true,
    )
    .unwrap();
    // A waiting receiver gets the message directly: no notification.
    let q2 = q.clone();
    let waiter = std::thread::spawn(move || q2.receive(false, None, || false));
    while q.lock().receivers.is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(send(&q, 2, b"direct"), Ok(None));
    assert_eq!(waiter.join().unwrap(), Ok((2, b"direct".to_vec())));
    assert_eq!(q.attr().curmsgs, 0);
    // With nobody waiting, the message that fills the empty queue fires the registration,
    // once.
    let fired = send(&q, 0, b"x").unwrap().unwrap();
    assert_eq!((fired.owner, fired.signo, fired.value), (1, 10, 7));
    // A sender waiting on the full queue is let in by a receive.
    let q2 = q.clone();
    let sender =
        std::thread::spawn(move || q2.send(9, b"late".to_vec(), false, None, &root(), || false));
    while q.lock().senders.is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(recv(&q).unwrap(), (0, b"x".to_vec()));
    assert_eq!(sender.join().unwrap(), Ok(None));
    assert_eq!(recv(&q).unwrap(), (9, b"late".to_vec()));
}

#[test]
fn one_registration_per_queue() {
    let ns = MqNamespace::default();
    let q = ns
        .open(b"n", libc::O_CREAT | libc::O_RDWR, 0o600, None, &root())
        .unwrap();
    q.notify(5, Some(Notify::Nothing), |_| true).unwrap();
    assert_eq!(
        q.notify(6, Some(Notify::Nothing), |_| true),
        Err(Errno::EBUSY)
    );
    // Another process's removal is ignored; a dead owner's registration is free.
    assert_eq!(q.notify(6, None, |_| true), Ok(None));
    // The registration replaced is returned (a SIGEV_THREAD one is told it went).
    assert_eq!(
        q.notify(6, Some(Notify::Nothing), |p| p != 5),
        Ok(Some(Registration {
            owner: 5,
            how: Notify::Nothing
        }))
    );
    assert!(q
        .status_line()
        .ends_with(b"NOTIFY:1     SIGNO:0     NOTIFY_PID:6     \n"));
    q.flush(6);
    assert!(q
        .status_line()
        .ends_with(b"NOTIFY:0     SIGNO:0     NOTIFY_PID:0     \n"));
    // SIGEV_NONE: nothing fires, the registration goes all the same.
    q.notify(6, Some(Notify::Nothing), |_| true).unwrap();
    assert_eq!(send(&q, 0, b"m"), Ok(None));
    assert_eq!(q.lock().notify, None);
}

#[test]
fn export_and_import_keep_queues() {
    let ns = MqNamespace::default();
    let q = ns
        .open(
            b"keep",
            libc::O_CREAT | libc::O_RDWR,
            0o640,
            attr(3, 8),
            &root(),
        )
        .unwrap();
    send(&q, 1, b"a").unwrap();
    send(&q, 4, b"b").unwrap();
    let image = ns.export();
    let other = MqNamespace::default();
    other.import(image.clone()).unwrap();
    let r = other.open(b"keep", libc::O_RDWR, 0, None, &root()).unwrap();
    assert_eq!(r.limits(), (3, 8));
    assert_eq!(recv(&r).unwrap(), (4, b"b".to_vec()));
    assert_eq!(other.import(image.clone()), Err(MqImportError::NotEmpty));
    let mut bad = image;
    bad[0].messages.push((MQ_PRIO_MAX, b"x".to_vec()));
    assert!(MqNamespace::default().import(bad).is_err());
}
