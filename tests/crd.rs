//! The CRD: generated file in sync, schema rules present, every field documented, example valid.

use kube::CustomResourceExt;
use kube::core::cel::validate_cel;
use redlock_operator::crd::{RedlockCluster, crd_yaml};
use serde_json::{Value, json};

const CRD_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/redlockcluster.yaml");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/redlockcluster.yaml");

fn schema() -> Value {
    let crd = serde_json::to_value(redlock_operator::crd::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn committed_crd_matches_the_generated_one() {
    let committed = std::fs::read_to_string(CRD_FILE).expect("crds/redlockcluster.yaml exists");
    assert!(
        committed == crd_yaml(),
        "crds/redlockcluster.yaml is out of date with src/crd/: run `make crds` and commit the result"
    );
}

#[test]
fn api_identity() {
    let crd = RedlockCluster::crd();
    assert_eq!(crd.spec.group, "redlock.dev");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["rlc".to_owned()][..])
    );
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    // `kubectl get rlc`: priority 0; UPDATED only with `-o wide` (priority 1).
    let columns: Vec<_> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.to_uppercase(), c.priority.unwrap_or(0)))
        .collect();
    let shown = |p: i32| -> Vec<&str> {
        columns
            .iter()
            .filter(|c| c.1 == p)
            .map(|c| c.0.as_str())
            .collect()
    };
    assert_eq!(
        shown(0),
        ["INSTANCES", "READY", "HELD", "QUORUM", "AVAILABLE", "AGE"]
    );
    assert_eq!(shown(1), ["UPDATED"]);
}

fn rules(node: &Value) -> Vec<String> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| r["rule"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn schema_carries_the_cel_rules() {
    let spec = &schema()["properties"]["spec"];
    let props = &spec["properties"];
    assert_eq!(
        spec["required"],
        json!(["maxLockTTL"]),
        "maxLockTTL is required, nothing else"
    );
    assert!(
        rules(&props["maxLockTTL"])
            .iter()
            .any(|r| r.contains("duration(self) > duration('0s')") && r.contains("duration('24h')"))
    );
    assert!(
        rules(&props["holdMargin"])
            .iter()
            .any(|r| r.contains("duration(self) >= duration('0s')"))
    );
    assert!(
        rules(&props["clockDriftFactor"])
            .iter()
            .any(|r| r.contains("self < 1.0"))
    );
    assert_eq!(rules(&props["redisConfig"]).len(), 3);
    assert_eq!(props["instances"]["minimum"], json!(1.0));
    assert_eq!(props["instances"]["maximum"], json!(99.0));
    assert_eq!(props["image"]["minLength"], json!(1));
}

#[test]
fn conditions_and_members_are_list_maps() {
    let status = &schema()["properties"]["status"]["properties"];
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["conditions"]["x-kubernetes-list-map-keys"],
        json!(["type"])
    );
    let condition = &status["conditions"]["items"]["properties"];
    for field in [
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    ] {
        assert!(condition.get(field).is_some(), "metav1.Condition field {field}");
    }
    assert_eq!(status["members"]["x-kubernetes-list-map-keys"], json!(["name"]));
}

/// Walks every property below `node`, calling `f(path, property)`.
fn walk(node: &Value, path: &str, f: &mut dyn FnMut(&str, &Value)) {
    if let Some(props) = node["properties"].as_object() {
        for (name, prop) in props {
            let p = format!("{path}.{name}");
            f(&p, prop);
            walk(prop, &p, f);
        }
    }
    for key in ["items", "additionalProperties"] {
        if node[key].is_object() {
            walk(&node[key], path, f);
        }
    }
}

#[test]
fn every_spec_and_status_field_is_documented() {
    let mut undocumented = vec![];
    walk(&schema(), "", &mut |path, prop| {
        let doc = prop["description"].as_str().unwrap_or("");
        if doc.trim().is_empty() && !path.starts_with(".metadata") && path != ".apiVersion" && path != ".kind"
        {
            undocumented.push(path.to_owned());
        }
    });
    assert!(
        undocumented.is_empty(),
        "fields without a description: {undocumented:?}"
    );
}

#[test]
fn our_descriptions_have_no_hard_line_breaks() {
    // kubectl explain re-wraps text but keeps newlines: doc-comment breaks would show up.
    let schema = schema();
    let max_lock_ttl = schema["properties"]["spec"]["properties"]["maxLockTTL"]["description"]
        .as_str()
        .unwrap();
    assert!(!max_lock_ttl.contains('\n'), "{max_lock_ttl:?}");
}

#[test]
fn no_unsigned_integer_formats() {
    let text = serde_json::to_string(&RedlockCluster::crd()).unwrap();
    assert!(
        !text.contains("\"uint"),
        "API servers >= 1.34 warn about uint formats"
    );
}

fn example() -> RedlockCluster {
    serde_yaml::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).expect("example parses")
}

#[test]
fn example_parses_and_passes_the_cel_rules() {
    let ex = example();
    assert_eq!(ex.spec.instances, 5);
    assert_eq!(
        std::time::Duration::from(ex.spec.max_lock_ttl),
        std::time::Duration::from_secs(30)
    );
    validate_cel(&ex).expect("example satisfies every CEL rule");
}

fn with_spec(patch: Value) -> RedlockCluster {
    let mut v = serde_json::to_value(example()).unwrap();
    for (k, val) in patch.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn cel_rules_refuse_bad_values_with_clear_messages() {
    let cases = [
        (
            json!({"maxLockTTL": "0s"}),
            "maxLockTTL must be a duration greater than 0s",
        ),
        (
            json!({"maxLockTTL": "-5s"}),
            "maxLockTTL must be a duration greater than 0s",
        ),
        (json!({"maxLockTTL": "25h"}), "at most 24h"),
        (
            json!({"holdMargin": "-1s"}),
            "holdMargin must be a duration from 0s to 1h",
        ),
        (
            json!({"clockDriftFactor": 1.0}),
            "clockDriftFactor must be at least 0 and less than 1",
        ),
        (
            json!({"clockDriftFactor": -0.5}),
            "clockDriftFactor must be at least 0 and less than 1",
        ),
        (
            json!({"redisConfig": {"save": "900 1"}}),
            "redisConfig may only set these keys",
        ),
        (
            json!({"redisConfig": {"timeout": "0\nsave 1 1"}}),
            "may not contain newlines",
        ),
        (
            json!({"redisConfig": {"timeout": "0\" \"save"}}),
            "may not contain newlines, quotes",
        ),
        (
            json!({"redisConfig": {"loglevel": "'notice'"}}),
            "may not contain newlines, quotes",
        ),
        (
            json!({"redisConfig": {"timeout": "0\rsave"}}),
            "may not contain newlines",
        ),
        (json!({"redisConfig": {"timeout": " "}}), "may not be empty"),
        (json!({"redisConfig": {"timeout": ""}}), "may not be empty"),
    ];
    for (patch, expected) in cases {
        let err = validate_cel(&with_spec(patch.clone())).expect_err(&format!("{patch} must be refused"));
        assert!(err.to_string().contains(expected), "{patch}: got {err}");
    }
    for ok in [
        json!({"maxLockTTL": "1m30s"}),
        json!({"maxLockTTL": "500ms"}),
        json!({"holdMargin": "0s"}),
        json!({"clockDriftFactor": 0.0}),
        json!({"redisConfig": {"timeout": "0", "maxclients": "1000"}}),
    ] {
        validate_cel(&with_spec(ok.clone())).unwrap_or_else(|e| panic!("{ok} must pass: {e}"));
    }
}

/// The API server and the operator draw the same line: every ASCII character and a few
/// others, alone and inside a value, pass the CEL rules exactly when the operator would
/// write them into redis.conf.
#[test]
fn cel_and_the_operator_accept_the_same_redis_config_values() {
    use redlock_operator::children::config::entry_problem;
    let chars = (0u8..128)
        .map(char::from)
        .chain(['\u{a0}', 'é', '\u{2028}', '\u{feff}', '😀']);
    for c in chars {
        for value in [format!("1{c}0"), c.to_string()] {
            let operator = entry_problem("timeout", &value).is_none();
            let cel = validate_cel(&with_spec(json!({"redisConfig": {"timeout": value}}))).is_ok();
            assert_eq!(cel, operator, "{value:?}: CEL {cel}, operator {operator}");
        }
    }
}

#[test]
fn missing_max_lock_ttl_does_not_deserialize() {
    let err = serde_json::from_value::<redlock_operator::crd::RedlockClusterSpec>(json!({"instances": 3}))
        .unwrap_err();
    assert!(err.to_string().contains("maxLockTTL"), "{err}");
}
