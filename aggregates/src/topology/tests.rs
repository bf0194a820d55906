use chrono::{TimeZone, Utc};
use cqrs_es::test::TestFramework;

use super::*;

fn service(name: &str, depends_on: &[&str], addresses: &[&str], aliases: &[&str]) -> DeclaredService {
    let strings = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
    DeclaredService {
        name: name.into(),
        depends_on: strings(depends_on),
        addresses: strings(addresses),
        aliases: strings(aliases),
    }
}

fn shop() -> Catalog {
    Catalog::new(vec![
        service("checkout-api", &["Ledger-DB"], &["10.0.0.5:8080"], &[]),
        service(
            "ledger-db",
            &[],
            &["10.0.0.9", "ledger.db.internal:5432"],
            &["pg-ledger"],
        ),
    ])
    .unwrap()
}

fn declare(user_id: &str, catalog: Catalog) -> TopologyCommand {
    TopologyCommand::Declare {
        user_id: user_id.into(),
        catalog,
        at: Utc.with_ymd_and_hms(2026, 11, 20, 14, 0, 0).unwrap(),
    }
}

fn declared(catalog: Catalog) -> TopologyEvent {
    TopologyEvent::CatalogDeclared {
        user_id: "owner".into(),
        catalog,
        at: Utc.with_ymd_and_hms(2026, 11, 20, 14, 0, 0).unwrap(),
    }
}

#[test]
fn a_catalog_is_declared_then_replaced_and_the_same_one_again_changes_nothing() {
    TestFramework::<Topology>::with(())
        .given_no_previous_events()
        .when(declare("owner", shop()))
        .then_expect_events(vec![declared(shop())]);
    TestFramework::<Topology>::with(())
        .given(vec![declared(shop())])
        .when(declare("owner", Catalog::default()))
        .then_expect_events(vec![declared(Catalog::default())]);
    TestFramework::<Topology>::with(())
        .given(vec![declared(shop())])
        .when(declare("owner", shop()))
        .then_expect_events(vec![]);
    TestFramework::<Topology>::with(())
        .given(vec![declared(shop())])
        .when(declare("intruder", Catalog::default()))
        .then_expect_error(TopologyError::NotFound);
}

#[test]
fn dependencies_resolve_to_service_names_and_addresses_are_normalized() {
    let catalog = shop();
    let checkout = &catalog.services()[0];
    assert_eq!(checkout.depends_on, ["ledger-db"]);
    assert_eq!(catalog.services()[1].addresses, ["10.0.0.9", "ledger.db.internal:5432"]);
    assert_eq!(catalog.edges().collect::<Vec<_>>(), [("checkout-api", "ledger-db")]);
    // An alias names the service too.
    let by_alias = Catalog::new(vec![
        service("a", &["PG-LEDGER"], &[], &[]),
        service("ledger-db", &[], &[], &["pg-ledger"]),
    ])
    .unwrap();
    assert_eq!(by_alias.services()[0].depends_on, ["ledger-db"]);
}

#[test]
fn bad_catalogs_are_refused_naming_the_field() {
    let refused = |services: Vec<DeclaredService>| Catalog::new(services).unwrap_err().to_string();
    assert_eq!(
        refused(vec![service("a", &[], &[], &[]), service(" A ", &[], &[], &[])]),
        "services[1].name: `A` is declared twice"
    );
    assert_eq!(
        refused(vec![service("a", &["a"], &[], &[])]),
        "services[0].dependsOn[0]: a service cannot depend on itself"
    );
    assert_eq!(
        refused(vec![service("a", &["b"], &[], &[])]),
        "services[0].dependsOn[0]: `b` is not a declared service"
    );
    assert_eq!(
        refused(vec![service("a", &[], &[], &["b"]), service("b", &[], &[], &[])]),
        "services[1].name: `b` is declared twice"
    );
    assert_eq!(
        refused(vec![
            service("a", &[], &["10.0.0.1"], &[]),
            service("b", &[], &["10.0.0.1"], &[])
        ]),
        "services[1].addresses[0]: `10.0.0.1` is already owned by `a`"
    );
    assert_eq!(
        refused(vec![service("  ", &[], &[], &[])]),
        "services[0].name: must not be blank"
    );
    assert!(refused(vec![service(&"x".repeat(129), &[], &[], &[])]).contains("at most 128 characters"));
    let many: Vec<DeclaredService> = (0..=MAX_SERVICES)
        .map(|i| service(&format!("s{i}"), &[], &[], &[]))
        .collect();
    assert_eq!(refused(many), format!("services: at most {MAX_SERVICES} services"));
    for bad in [
        "10.0.0.1:99999",
        "10.0.0",
        "-db",
        "a b",
        "db.internal:0",
        "http://x.io/",
    ] {
        assert!(
            refused(vec![service("a", &[], &[bad], &[])]).starts_with("services[0].addresses[0]: "),
            "{bad}"
        );
    }
}

#[test]
fn addresses_show_under_the_evidence_keys_alerts_use() {
    let keys = |raw: &str| Address::parse(raw).unwrap().evidence_keys();
    assert_eq!(keys("10.0.0.9"), ["ip=10.0.0.9"]);
    assert_eq!(keys(" 10.0.0.9:6379 "), ["endpoint=10.0.0.9:6379"]);
    assert_eq!(
        keys("Ledger.DB.internal"),
        ["dns=ledger.db.internal", "host=ledger.db.internal"]
    );
    assert_eq!(keys("ledger.db.internal:5432"), ["endpoint=ledger.db.internal:5432"]);
    assert_eq!(keys("pg-01"), ["host=pg-01"]);
    assert_eq!(Address::parse("[::1]:443").unwrap().to_string(), "[::1]:443");
}
