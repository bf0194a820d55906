//! The readers' rules, read by read: what each accepts, refuses and reads as absent.

use serde_json::json;

use super::*;
use crate::ingest::parsers::{tags::*, vocabulary::*};

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("valid test time")
        .with_timezone(&Utc)
}

#[test]
fn epoch_seconds_as_number_string_and_fraction() {
    let expected = utc("2026-11-20T11:04:00Z");
    assert_eq!(timestamp(&json!(1795172640)), Some(expected));
    assert_eq!(timestamp(&json!("1795172640")), Some(expected));
    assert_eq!(timestamp(&json!("1795172640.000")), Some(expected));
    assert_eq!(timestamp(&json!("1795172640.25")), Some(utc("2026-11-20T11:04:00.25Z")));
    assert_eq!(timestamp(&json!(1795172640.5)), Some(utc("2026-11-20T11:04:00.5Z")));
}

#[test]
fn epoch_millis_keep_their_milliseconds() {
    let expected = utc("2026-11-20T07:55:00.123Z");
    assert_eq!(timestamp(&json!(1795161300123_i64)), Some(expected));
    assert_eq!(timestamp(&json!("1795161300123")), Some(expected));
}

#[test]
fn epochs_are_read_by_magnitude_up_to_nanoseconds() {
    let expected = utc("2026-11-20T07:55:00.123456789Z");
    assert_eq!(timestamp(&json!(1_795_161_300_123_456_789_i64)), Some(expected));
    assert_eq!(timestamp(&json!("1795161300123456789")), Some(expected));
    assert_eq!(
        timestamp(&json!(1_795_161_300_123_456_i64)),
        Some(utc("2026-11-20T07:55:00.123456Z"))
    );
    assert_eq!(
        timestamp(&json!("1795161300123456.5")),
        Some(utc("2026-11-20T07:55:00.1234565Z"))
    );
    // A float in nanoseconds keeps what a double holds of it (microseconds, here).
    let float = timestamp(&json!(1.795_161_300_123_456_8e18)).expect("a time");
    assert_eq!(float.timestamp(), 1_795_161_300);
    assert_eq!(float.timestamp_subsec_micros() / 10, 12_345);
    assert_eq!(timestamp(&json!(u64::MAX)), None, "past what the clock library holds");
}

#[test]
fn epoch_in_the_other_unit_is_read_by_magnitude() {
    let expected = utc("2026-11-20T07:55:00Z");
    assert_eq!(timestamp(&json!(1795161300000_i64)), Some(expected));
    assert_eq!(timestamp(&json!(1795161300)), Some(expected));
}

#[test]
fn rfc3339_with_nanoseconds_offsets_and_loose_forms() {
    let expected = utc("2026-11-20T14:02:10.123456789Z");
    assert_eq!(timestamp(&json!("2026-11-20T14:02:10.123456789Z")), Some(expected));
    assert_eq!(timestamp(&json!("2026-11-20T16:02:10.123456789+02:00")), Some(expected));
    assert_eq!(timestamp(&json!("2026-11-20T09:02:10.123456789-0500")), Some(expected));
    assert_eq!(timestamp(&json!("2026-11-20 14:02:10.123456789")), Some(expected));
    assert_eq!(timestamp(&json!("2026-11-20T15:02:10.123456789+01")), Some(expected));
    assert_eq!(timestamp(&json!("2026-11-20T09:02:10.123456789-05")), Some(expected));
}

/// The error message of a reader's result, for comparisons.
fn message<T: std::fmt::Debug>(result: Result<T, ParseError>) -> String {
    result.expect_err("must be rejected").to_string()
}

#[test]
fn unset_times_are_absent() {
    for value in [
        json!(null),
        json!("0001-01-01T00:00:00Z"),
        json!("1970-01-01T00:00:00Z"),
        json!(0),
        json!(0.0),
        json!("0"),
        json!(-1),
        json!(-5),
        json!(-1.5),
        json!("-5"),
        json!(""),
        json!("  "),
    ] {
        let payload = json!({ "t": value });
        let obj = Obj::root(&payload).expect("object");
        assert_eq!(obj.time("t", EpochUnit::Seconds), Ok(None), "{value}");
        assert_eq!(obj.time("t", EpochUnit::Millis), Ok(None), "{value}");
    }
}

#[test]
fn garbage_times_are_errors_naming_the_field() {
    for (value, found) in [
        (json!("yesterday"), "\"yesterday\""),
        (json!("not-a-time"), "\"not-a-time\""),
        (json!("2026-13-45T99:00:00Z"), "\"2026-13-45T99:00:00Z\""),
        (json!(1e300), "1e+300"),
        (json!(u64::MAX), "18446744073709551615"),
        (json!("99999999999999999999999"), "\"99999999999999999999999\""),
        (json!("1.2.3"), "\"1.2.3\""),
        (json!("NaN"), "\"NaN\""),
        (json!(true), "a boolean"),
        (json!({}), "an object"),
        (json!({"x": 1}), "an object"),
        (json!([]), "an array"),
        (json!(["2026-11-20T14:02:10Z"]), "an array"),
    ] {
        let payload = json!({ "event": { "t": value } });
        let event = Obj::root(&payload)
            .and_then(|root| root.require_object("event"))
            .expect("event");
        let error = event.time("t", EpochUnit::Seconds).expect_err("garbage");
        assert_eq!(error.field(), Some("event.t"), "{value}");
        assert_eq!(
            error.to_string(),
            format!("field `event.t` must be an RFC 3339 time or epoch seconds, not {found}"),
            "{value}"
        );
        assert_eq!(
            message(event.time("t", EpochUnit::Millis)),
            format!("field `event.t` must be an RFC 3339 time or epoch milliseconds, not {found}"),
        );
    }
}

#[test]
fn long_unreadable_values_are_shortened_in_messages() {
    let payload = json!({ "t": "x".repeat(100) });
    let obj = Obj::root(&payload).expect("object");
    assert_eq!(
        message(obj.time("t", EpochUnit::Seconds)),
        format!(
            "field `t` must be an RFC 3339 time or epoch seconds, not \"{}…",
            "x".repeat(39)
        )
    );
}

#[test]
fn text_from_strings_numbers_and_multivalue_lists() {
    let payload = json!({
        "s": " a ", "n": 42, "f": 1842.0, "blank": " ", "list": ["", "a", "b"], "empty": [], "nulls": [null],
        "null": null, "b": true, "o": {"x": 1}, "nested": ["a", ["b"]],
    });
    let obj = Obj::root(&payload).expect("object");
    for (name, expected) in [
        ("s", Some("a")),
        ("n", Some("42")),
        ("f", Some("1842")),
        ("blank", None),
        ("list", Some("a")),
        ("empty", None),
        ("nulls", None),
        ("null", None),
        ("absent", None),
    ] {
        assert_eq!(obj.text(name), Ok(expected.map(str::to_owned)), "{name}");
    }
    assert_eq!(
        message(obj.text("b")),
        "field `b` must be a string or a number, not a boolean"
    );
    assert_eq!(
        message(obj.text("o")),
        "field `o` must be a string or a number, not an object"
    );
    assert_eq!(
        message(obj.text("nested")),
        "field `nested[1]` must be a string or a number, not an array"
    );
    assert_eq!(obj.first_text(&["blank", "absent", "s"]), Ok(Some("a".to_owned())));
    assert_eq!(
        message(obj.first_text(&["s", "o"])),
        "field `o` must be a string or a number, not an object",
        "every alternative present must be usable"
    );
}

#[test]
fn integers_from_numbers_and_numeric_strings() {
    let payload = json!({
        "a": 1842, "b": " 1842 ", "c": 1842.0, "d": "1842.0", "big": "9007199254740993", "neg": -3, "blank": "",
        "abc": "abc", "huge": 1e300, "huge_text": "1e300", "fraction": 4.5, "list": [1], "flag": false,
    });
    let obj = Obj::root(&payload).expect("object");
    for name in ["a", "b", "c", "d"] {
        assert_eq!(obj.integer(name), Ok(Some(1842)), "{name}");
    }
    assert_eq!(obj.integer("big"), Ok(Some(9_007_199_254_740_993)));
    assert_eq!(obj.integer("neg"), Ok(Some(-3)));
    assert_eq!(obj.integer("blank"), Ok(None));
    assert_eq!(obj.integer("absent"), Ok(None));
    for (name, found) in [
        ("abc", "\"abc\""),
        ("huge", "1e+300"),
        ("huge_text", "\"1e300\""),
        ("fraction", "4.5"),
        ("list", "an array"),
        ("flag", "a boolean"),
    ] {
        assert_eq!(
            message(obj.integer(name)),
            format!("field `{name}` must be an integer or a numeric string, not {found}")
        );
    }
    assert_eq!(obj.require_integer("b"), Ok(1842));
    assert_eq!(
        obj.require_integer("blank"),
        Err(ParseError::Empty { field: "blank".into() })
    );
    assert_eq!(
        obj.require_integer("absent"),
        Err(ParseError::MissingField { field: "absent".into() })
    );
}

#[test]
fn objects_and_lists_of_objects() {
    let payload = json!({
        "o": {"k": " v ", "bad": [{}]}, "s": "x", "l": [{"a": 1}, null, {"b": 2}], "lo": {}, "junk": [{}, "junk"],
    });
    let obj = Obj::root(&payload).expect("object");
    let inner = obj.object("o").expect("readable").expect("present");
    assert_eq!(inner.text("k"), Ok(Some("v".to_owned())));
    assert_eq!(
        message(inner.text("bad")),
        "field `o.bad[0]` must be a string or a number, not an object"
    );
    assert!(obj.object("absent").expect("readable").is_none());
    assert_eq!(message(obj.object("s")), "field `s` must be an object, not a string");
    let empty = obj.object_or_empty("absent").expect("readable");
    assert_eq!(empty.text("k"), Ok(None));
    assert!(empty.scalar_labels().is_empty());
    assert_eq!(
        message(obj.object_or_empty("s")),
        "field `s` must be an object, not a string"
    );

    let elements = obj.objects("l").expect("readable");
    assert_eq!(elements.len(), 2, "null elements are skipped");
    assert_eq!(
        message(elements[1].object("b")),
        "field `l[2].b` must be an object, not a number",
        "elements keep their index in paths"
    );
    assert!(obj.objects("absent").expect("readable").is_empty());
    assert_eq!(message(obj.objects("lo")), "field `lo` must be an array, not an object");
    assert_eq!(
        message(obj.objects("junk")),
        "field `junk[1]` must be an object, not a string"
    );
}

#[test]
fn label_values_from_scalars_and_lists() {
    let payload = json!({"s": " a ", "b": true, "l": ["a", 2, false, "", null], "o": {}, "lo": ["a", {}]});
    let obj = Obj::root(&payload).expect("object");
    assert_eq!(obj.label("s"), Ok(Some("a".to_owned())));
    assert_eq!(obj.label("b"), Ok(Some("true".to_owned())));
    assert_eq!(obj.label("l"), Ok(Some("a,2,false".to_owned())));
    assert_eq!(obj.label_values("l").map(|values| values.len()), Ok(3));
    assert_eq!(obj.label("absent"), Ok(None));
    assert_eq!(
        message(obj.label("o")),
        "field `o` must be a string, a number or a boolean, not an object"
    );
    assert_eq!(
        message(obj.label("lo")),
        "field `lo[1]` must be a string, a number or a boolean, not an object"
    );
}

#[test]
fn ids_from_strings_and_numbers() {
    let payload = json!({"a": " 42 ", "b": 42, "c": 42.0, "d": 4.5, "e": "", "f": {}, "g": null});
    let obj = Obj::root(&payload).expect("object");
    assert_eq!(obj.require_id("a"), Ok("42".to_owned()));
    assert_eq!(obj.require_id("b"), Ok("42".to_owned()));
    assert_eq!(obj.require_id("c"), Ok("42".to_owned()));
    assert_eq!(obj.require_id("d"), Ok("4.5".to_owned()));
    assert_eq!(obj.require_id("e"), Err(ParseError::Empty { field: "e".into() }));
    assert_eq!(
        obj.require_id("f").map_err(|error| error.to_string()),
        Err("field `f` must be a string or a number, not an object".to_owned())
    );
    assert_eq!(obj.require_id("g"), Err(ParseError::MissingField { field: "g".into() }));
}

#[test]
fn a_blank_first_id_reads_as_absent() {
    let payload = json!({"node": {"id": " ", "hostname": "db-01"}});
    let node = Obj::root(&payload)
        .and_then(|root| root.require_object("node"))
        .expect("node");
    assert_eq!(node.require_first_id(&["id", "hostname"]), Ok("db-01".to_owned()));
    let blank_only = json!({"id": ""});
    assert_eq!(
        Obj::root(&blank_only).and_then(|root| root.require_first_id(&["id", "hostname"])),
        Err(ParseError::Empty { field: "id".into() }),
        "with no other name set, the blank one is reported"
    );
}

#[test]
fn first_id_names_all_alternatives_when_none_is_present() {
    let payload = json!({"node": {}});
    let node = Obj::root(&payload)
        .and_then(|root| root.require_object("node"))
        .expect("node");
    assert_eq!(
        node.require_first_id(&["id", "hostname"])
            .map_err(|error| error.to_string()),
        Err("missing field: one of `node.id`, `node.hostname` is required".to_owned())
    );
}

#[test]
fn tags_from_comma_string_or_list() {
    let expected = vec![
        Tag {
            key: "env".into(),
            value: "prod".into(),
        },
        Tag {
            key: "service".into(),
            value: "a:b".into(),
        },
        Tag {
            key: "monitor".into(),
            value: String::new(),
        },
    ];
    let payload = json!({
        "string": "env:prod, service:a:b ,monitor,, ",
        "list": ["env:prod", " service:a:b", "monitor", 7.5, null],
        "blank": "",
        "number": 42,
        "object": {"service": "x"},
        "junk": ["env:prod", {}],
    });
    let obj = Obj::root(&payload).expect("object");
    assert_eq!(obj.tags("string"), Ok(expected.clone()));
    assert_eq!(obj.tags("list").map(|tags| tags.len()), Ok(4));
    assert_eq!(obj.tags("blank"), Ok(Vec::new()));
    assert_eq!(obj.tags("absent"), Ok(Vec::new()));
    assert_eq!(find_tag(&expected, "SERVICE"), Some("a:b".to_owned()));
    assert_eq!(find_tag(&expected, "monitor"), None);
    assert_eq!(
        message(obj.tags("number")),
        "field `number` must be a comma-separated string or an array, not a number"
    );
    assert_eq!(
        message(obj.tags("object")),
        "field `object` must be a comma-separated string or an array, not an object"
    );
    assert_eq!(
        message(obj.tags("junk")),
        "field `junk[1]` must be a string or a number, not an object"
    );
}

#[test]
fn multivalue_text_takes_the_first_value() {
    assert_eq!(scalar_text(&json!(["", "a", "b"])), Some("a".to_owned()));
    assert_eq!(scalar_text(&json!([[1], {}])), None);
    assert_eq!(scalar_text(&json!("  ")), None);
    assert_eq!(label_text(&json!(["a", 2])), Some("a,2".to_owned()));
}

#[test]
fn severity_words_are_normalized() {
    assert_eq!(normalize_severity("CRITICAL").as_deref(), Some("critical"));
    assert_eq!(normalize_severity(" Warn ").as_deref(), Some("warning"));
    assert_eq!(normalize_severity("Informational").as_deref(), Some("info"));
    assert_eq!(normalize_severity("P1").as_deref(), Some("p1"));
    assert_eq!(normalize_severity("  "), None);
    assert_eq!(deployment_severity("FAILURE").as_deref(), Some("critical"));
    assert_eq!(deployment_severity("aborted").as_deref(), Some("warning"));
    assert_eq!(deployment_severity("Succeeded").as_deref(), Some("info"));
    assert_eq!(deployment_severity("NOT_BUILT").as_deref(), Some("not_built"));
}
