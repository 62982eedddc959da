//! The configuration as commented TOML: every key, each under its documentation, with
//! keys that have no value (optional ones left unset) commented out beside an example.
//! The comments are the config types' doc comments, which `schemars` keeps at run time;
//! `toml` itself writes no comments, and `toml_edit` keeps only the comments a file
//! already had.

use std::collections::HashMap;
use std::fmt::Write;

use serde_json::Value as Json;

use crate::ProxyConfig;

/// What an optional key looks like when set, for the commented-out line: keys whose
/// default is "unset" have no value to print.
fn example(path: &str) -> Option<&'static str> {
    Some(match path {
        "advertise" => "\"sip.example.net:5060\"",
        "next_hop" => "\"127.0.0.1:5070\"",
        "cost_other_us" => "0.0",
        "admin" => "\"127.0.0.1:9090\"",
        "duration_s" => "60.0",
        "control.win_auto.delay_binding_ms"
        | "overload.client.window_probe_after_ms"
        | "control.rate_occ.queue_gate_ms" => "200",
        "control.backstop_work_ms"
        | "control.threshold.work_mark_ms"
        | "control.ohta.work_mark_ms"
        | "control.red.work_mark_ms"
        | "control.occ.work_mark_ms"
        | "control.latency_bucket.work_mark_ms"
        | "control.pi.work_mark_ms" => "250",
        "control.threshold.high_watermark" | "control.ohta.hi_wm" => "400",
        "control.red.th_low" => "400.0",
        "control.threshold.low_watermark" | "control.ohta.lo_wm" => "300",
        "control.pi.max_drain_rate" | "control.latency_bucket.max_rate" | "control.red.th_high" => {
            "1000.0"
        }
        "overload.client.blocking" => "\"discard\"",
        "control.fairness" => "\"max-min\"",
        "control.backstop_drain_share" => "1.0",
        "routes.host" => "\"example.com\"",
        "routes.user" => "\"alice\"",
        _ => return None,
    })
}

/// The schema of a property: its own, or the definition it refers to (directly, or in an
/// `anyOf`/`allOf`/`oneOf`, as schemars writes `Option<T>` and documented references).
fn resolve<'a>(schema: &'a Json, defs: &'a Json) -> &'a Json {
    let reference = schema.get("$ref").or_else(|| {
        ["anyOf", "allOf", "oneOf"].iter().find_map(|k| {
            schema
                .get(*k)?
                .as_array()?
                .iter()
                .find_map(|s| s.get("$ref"))
        })
    });
    reference
        .and_then(Json::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name))
        .unwrap_or(schema)
}

/// The values an enumeration takes, as schemars lists them (`enum`, or `oneOf` of
/// constants when the variants are documented).
fn choices(schema: &Json) -> Option<String> {
    let plain = schema.get("enum").and_then(Json::as_array).cloned();
    let documented = || {
        schema
            .get("oneOf")?
            .as_array()?
            .iter()
            .try_fold(Vec::new(), |mut all, v| {
                match (v.get("const"), v.get("enum").and_then(Json::as_array)) {
                    (Some(c), _) => all.push(c.clone()),
                    (None, Some(e)) => all.extend(e.iter().cloned()),
                    (None, None) => return None,
                }
                Some(all)
            })
    };
    let values = plain.or_else(documented)?;
    let names: Vec<String> = values
        .iter()
        .filter_map(Json::as_str)
        .map(|v| format!("\"{v}\""))
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

fn comment(out: &mut String, text: &str) {
    for line in text.lines() {
        if line.trim().is_empty() {
            out.push_str("#\n");
        } else {
            let _ = writeln!(out, "# {line}");
        }
    }
}

/// The keys of each table in the order the config types declare them, read off what
/// `toml` writes (the schema's and `toml::Table`'s maps are sorted by name).
fn declared_order(text: &str) -> HashMap<String, Vec<String>> {
    let mut order: HashMap<String, Vec<String>> = HashMap::new();
    let mut table = String::new();
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            header.clone_into(&mut table);
        } else if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let (parent, name) = header.rsplit_once('.').unwrap_or(("", header));
            order
                .entry(parent.to_owned())
                .or_default()
                .push(name.to_owned());
            header.clone_into(&mut table);
        } else if let Some((key, _)) = line.split_once(" = ") {
            let keys = order.entry(table.clone()).or_default();
            if !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
            }
        }
    }
    order
}

/// Writes the keys of one table: scalars and arrays first (TOML puts every key of a
/// table before its sub-tables), then each sub-table under its `[header]`.
fn table(
    out: &mut String,
    path: &str,
    value: &toml::Table,
    schema: &Json,
    defs: &Json,
    order: &HashMap<String, Vec<String>>,
) {
    let Some(properties) = resolve(schema, defs)
        .get("properties")
        .and_then(Json::as_object)
    else {
        return;
    };
    // Declared keys first, in their order; keys unset (absent from `toml`'s output) after.
    let declared = order.get(path);
    let rank = |name: &str| {
        declared
            .and_then(|keys| keys.iter().position(|k| k == name))
            .unwrap_or(usize::MAX)
    };
    let mut properties: Vec<(&String, &Json)> = properties.iter().collect();
    properties.sort_by_key(|(name, _)| rank(name));
    let is_table = |name: &str| {
        matches!(value.get(name), Some(toml::Value::Table(_)))
            || (value.get(name).is_none()
                && properties.iter().any(|(n, p)| {
                    n.as_str() == name && resolve(p, defs).get("properties").is_some()
                }))
    };
    let key_path = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    let is_table_array = |name: &str| match value.get(name) {
        Some(toml::Value::Array(items)) => {
            !items.is_empty() && items.iter().all(|i| matches!(i, toml::Value::Table(_)))
        }
        _ => false,
    };
    let plain = |name: &str| !is_table(name) && !is_table_array(name);
    for (name, property) in properties.iter().copied().filter(|(n, _)| plain(n)) {
        out.push('\n');
        let of_type = resolve(property, defs);
        let doc = property
            .get("description")
            .or_else(|| of_type.get("description"))
            .and_then(Json::as_str);
        if let Some(doc) = doc {
            comment(out, doc);
        }
        if let Some(values) = choices(of_type) {
            comment(out, &format!("One of: {values}."));
        }
        if let Some(v) = value.get(name) {
            let _ = writeln!(out, "{name} = {v}");
        } else {
            let shown = example(&key_path(name)).unwrap_or("\"\"");
            let _ = writeln!(out, "# {name} = {shown}");
        }
    }
    for (name, property) in properties
        .iter()
        .copied()
        .filter(|(n, _)| is_table_array(n))
    {
        let sub = key_path(name);
        out.push('\n');
        if let Some(doc) = property.get("description").and_then(Json::as_str) {
            comment(out, doc);
        }
        let item_schema = property.get("items").unwrap_or(&Json::Null);
        if let Some(toml::Value::Array(items)) = value.get(name) {
            for item in items.iter().filter_map(toml::Value::as_table) {
                let _ = writeln!(out, "[[{sub}]]");
                let mut keys = String::new();
                table(&mut keys, &sub, item, item_schema, defs, order);
                out.push_str(keys.trim_start_matches('\n'));
            }
        }
    }
    for (name, property) in properties.iter().copied().filter(|(n, _)| is_table(n)) {
        let sub = key_path(name);
        let _ = writeln!(out, "\n[{sub}]");
        let doc = property
            .get("description")
            .or_else(|| resolve(property, defs).get("description"))
            .and_then(Json::as_str);
        if let Some(doc) = doc {
            comment(out, doc);
        }
        let empty = toml::Table::new();
        let inner = match value.get(name) {
            Some(toml::Value::Table(t)) => t,
            _ => &empty,
        };
        table(out, &sub, inner, property, defs, order);
    }
}

impl ProxyConfig {
    /// The configuration as TOML with every key documented; it reads back as `self`.
    pub fn to_commented_toml(&self) -> String {
        let values = match toml::Table::try_from(self) {
            Ok(t) => t,
            Err(e) => return format!("# cannot print config: {e}\n"),
        };
        let schema = serde_json::to_value(schemars::schema_for!(ProxyConfig)).unwrap_or_default();
        let defs = schema.get("$defs").cloned().unwrap_or_default();
        let mut out = String::from(
            "# sluice proxy configuration (`sluice proxy --config FILE`). Every key has a\n\
             # default; a key left out takes it, and flags override the file. Keys\n\
             # commented out are unset; remove the `#` to set one.\n",
        );
        if let Some(doc) = schema.get("description").and_then(Json::as_str) {
            comment(&mut out, doc);
        }
        let order = declared_order(&toml::to_string(self).unwrap_or_default());
        table(&mut out, "", &values, &schema, &defs, &order);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uncommented(text: &str) -> String {
        text.lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|rest| {
                        rest.split_once(" = ").is_some_and(|(k, _)| {
                            k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        })
                    })
                    .unwrap_or(l)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The example config is what `--print-config` prints for it: every key, documented.
    /// Regenerate with `sluice proxy --config examples/proxy.toml --print-config`.
    #[test]
    fn the_example_config_is_the_printed_one() {
        let example = include_str!("../../../examples/proxy.toml");
        let config: ProxyConfig = toml::from_str(example).unwrap();
        assert!(config.next_hop.is_some() && !config.routes.is_empty());
        assert!(
            config.to_commented_toml() == example,
            "examples/proxy.toml is stale: regenerate it with \
             `sluice proxy --config examples/proxy.toml --print-config`"
        );
    }

    #[test]
    fn the_commented_config_reads_back_as_the_config() {
        let mut config = ProxyConfig {
            next_hop: Some("127.0.0.1:5070".parse().unwrap()),
            ..ProxyConfig::default()
        };
        config.control.algorithm = "pi".parse().unwrap();
        let text = config.to_commented_toml();
        let back: ProxyConfig = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, config);
    }

    fn keys(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in t {
            match v {
                toml::Value::Table(inner) => keys(inner, &format!("{prefix}{k}."), out),
                _ => out.push(format!("{prefix}{k}")),
            }
        }
    }

    #[test]
    fn every_key_is_documented_and_optional_ones_are_commented_out_with_an_example() {
        let mut config = ProxyConfig::default();
        config.routes.push(crate::RouteRule {
            host: None,
            user: Some("bob".into()),
            next_hop: "127.0.0.1:5090".parse().unwrap(),
        });
        let text = config.to_commented_toml();
        assert!(
            !text.contains("= \"\""),
            "an unset key without an example:\n{text}"
        );
        for line in [
            "# next_hop = \"127.0.0.1:5070\"",
            "# admin = \"127.0.0.1:9090\"",
            "queue_capacity = 500",
            "[control.pi]",
            "[overload.server]",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
        // Each key line follows its comment.
        let lines: Vec<&str> = text.lines().collect();
        let mut undocumented = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let is_key = !line.starts_with('#') && !line.starts_with('[') && line.contains(" = ");
            if is_key && !lines[i - 1].starts_with('#') {
                undocumented.push(*line);
            }
        }
        assert!(
            undocumented.is_empty(),
            "no documentation above {undocumented:#?}"
        );
        // Uncommented, the examples are valid values of their keys.
        let all_set: ProxyConfig = toml::from_str(&uncommented(&text))
            .unwrap_or_else(|e| panic!("{e}\n{}", uncommented(&text)));
        assert_eq!(all_set.admin, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(all_set.duration_s, Some(60.0));
        // Every field of the default config is printed.
        let flat = toml::Table::try_from(ProxyConfig::default()).unwrap();
        let mut all = Vec::new();
        keys(&flat, "", &mut all);
        let printed: ProxyConfig = toml::from_str(&text).unwrap();
        let mut printed_keys = Vec::new();
        keys(
            &toml::Table::try_from(printed).unwrap(),
            "",
            &mut printed_keys,
        );
        assert_eq!(all, printed_keys);
        assert!(all.len() > 100, "{} keys", all.len());
    }
}
