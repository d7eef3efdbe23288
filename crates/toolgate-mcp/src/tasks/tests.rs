use std::sync::Mutex;

use super::book::answer_state;
use super::*;
use crate::message;

fn run() -> RunId {
    RunId::parse("run-tasks").unwrap()
}

#[test]
fn a_declaration_is_read_only_where_the_extension_puts_it() {
    let declared =
        json!({"params": {"_meta": {CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: {}}}}}});
    assert!(client_declares_tasks(&declared));
    for other in [
        json!({"params": {"_meta": {"extensions": {EXTENSION: {}}}}}),
        json!({"params": {"_meta": {CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: true}}}}}),
        json!({"params": {"task": {"ttl": 1000}}}),
    ] {
        assert!(!client_declares_tasks(&other), "{other}");
    }
    let mut stripped = declared.clone();
    strip_declaration(&mut stripped);
    assert!(!client_declares_tasks(&stripped));
}

#[test]
fn a_task_is_seen_only_by_its_run_and_session_and_cancelled_only_while_waiting() {
    let book = TaskBook::default();
    let (task, created) = book.open(&run(), Some("s1"), "appr-1").unwrap();
    assert_eq!(created["resultType"], "task");
    assert_eq!(created["status"], "working");
    let id = json!(7);
    let other_run = RunId::parse("run-other").unwrap();
    for (run_id, session) in [
        (&other_run, Some("s1")),
        (&run(), Some("s2")),
        (&run(), None),
    ] {
        let answer = book.answer(&id, "tasks/get", &task, run_id, session);
        assert_eq!(answer["error"]["code"], message::INVALID_PARAMS, "{answer}");
    }
    let seen = book.answer(&id, "tasks/get", &task, &run(), Some("s1"));
    assert_eq!(seen["result"]["status"], "working");
    assert!(
        seen["result"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains("appr-1")
    );
    assert!(book.begin_deciding(&task));
    assert!(book.mark_sent(&task));
    let late = book.answer(&id, "tasks/cancel", &task, &run(), Some("s1"));
    assert!(late.get("error").is_some(), "{late}");
    book.settle(&task, &json!({"result": {"content": []}}));
    let done = book.answer(&id, "tasks/get", &task, &run(), Some("s1"));
    assert_eq!(done["result"]["status"], "completed");
    assert_eq!(
        done["result"]["result"],
        json!({"content": [], "resultType": "complete"}),
        "a 2026-07-28 result is always marked complete"
    );

    let (second, _) = book.open(&run(), None, "appr-2").unwrap();
    let cancelled = book.answer(&id, "tasks/cancel", &second, &run(), None);
    assert_eq!(cancelled["result"]["resultType"], "complete");
    assert!(!book.is_waiting(&second));
    assert!(
        !book.begin_deciding(&second),
        "a cancelled task is never forwarded"
    );
}

#[test]
fn tasks_are_bounded_per_run_per_server_and_in_all() {
    let book = TaskBook::default();
    for i in 0..MAX_OPEN_TASKS_PER_RUN {
        assert!(book.open(&run(), None, &format!("a{i}")).is_some());
    }
    assert!(book.open(&run(), None, "one-too-many").is_none());
    let runs: Vec<RunId> = (0..MAX_OPEN_TASKS)
        .map(|i| RunId::parse(&format!("run-{i}")).unwrap())
        .collect();
    let opened = runs
        .iter()
        .filter(|r| book.open(r, None, "b").is_some())
        .count();
    assert_eq!(opened, MAX_OPEN_TASKS - MAX_OPEN_TASKS_PER_RUN);

    // Opened and cancelled in a loop: ended tasks make room, the book
    // never holds more than its bound.
    let book = TaskBook::default();
    let id = json!(1);
    for i in 0..(MAX_TASKS * 2) {
        let (task, _) = book
            .open(&run(), None, "c")
            .unwrap_or_else(|| panic!("open {i}"));
        book.answer(&id, "tasks/cancel", &task, &run(), None);
    }
    assert!(book.count() <= MAX_TASKS);

    book.close();
    assert!(book.open(&run(), None, "after-close").is_none());
}

#[test]
fn every_end_of_a_task_is_counted_once() {
    let counted = Arc::new(Mutex::new(Vec::new()));
    let book = TaskBook::default();
    let seen = counted.clone();
    book.observe(Arc::new(move |e| seen.lock().unwrap().push(e)));
    let id = json!(1);
    let (done, _) = book.open(&run(), None, "a").unwrap();
    let (cancelled, _) = book.open(&run(), None, "b").unwrap();
    let (_, _) = book.open(&run(), None, "c").unwrap();
    book.settle(&done, &json!({"result": {"content": []}}));
    book.settle(&done, &json!({"error": {"code": 1, "message": "late"}}));
    book.answer(&id, "tasks/cancel", &cancelled, &run(), None);
    book.close();
    use TaskEvent::*;
    assert_eq!(
        *counted.lock().unwrap(),
        [Created, Created, Created, Completed, Cancelled, Failed]
    );
}

#[test]
fn only_a_plain_result_completes_a_task() {
    for (answer, completes) in [
        (json!({"result": {"content": []}}), true),
        (
            json!({"result": {"resultType": "complete", "content": []}}),
            true,
        ),
        (
            json!({"result": {"resultType": "input_required", "inputRequests": {}}}),
            false,
        ),
        (
            json!({"result": {"content": [], "inputRequests": {"a": {}}}}),
            false,
        ),
        (
            json!({"result": {"resultType": "task", "taskId": "x"}}),
            false,
        ),
        (json!({"result": "text"}), false),
        (
            json!({"error": {"code": -32042, "message": "open", "data": {"url": "https://x"}}}),
            false,
        ),
        (json!({"error": {"code": "bad"}}), false),
        (json!({"error": {"code": -32000, "message": "boom"}}), false),
    ] {
        let state = answer_state(&answer);
        assert_eq!(matches!(state, State::Completed(_)), completes, "{answer}");
        if let State::Failed(e) = state {
            assert!(e["code"].is_i64() && e["message"].is_string(), "{e}");
            assert!(
                e.get("data").is_none() || answer["error"]["code"] != -32042,
                "{e}"
            );
        }
    }
}

#[test]
fn only_the_gateways_task_ids_are_answered_here() {
    let ours =
        json!({"id": 1, "method": "tasks/get", "params": {"taskId": format!("{TASK_ID_PREFIX}x")}});
    assert!(own_task_request(&ours).is_some());
    let theirs = json!({"id": 1, "method": "tasks/get", "params": {"taskId": "server-task"}});
    assert!(own_task_request(&theirs).is_none());
    let notification =
        json!({"method": "tasks/get", "params": {"taskId": format!("{TASK_ID_PREFIX}x")}});
    assert!(own_task_request(&notification).is_none());
}
