//! Patches, applied to an object's JSON as kube-apiserver applies them
//! before decoding the result (k8s.io/apiserver/pkg/endpoints/handlers/patch.go):
//! JSON merge patch (RFC 7386), the strategic merge of lists keyed by
//! `type` (conditions), and RFC 6902 JSON patch (the `json-patch` crate).

use serde_json::{json, Value};

/// JSON merge patch (RFC 7386): maps merge, `null` deletes, anything else replaces.
pub fn merge_json(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_json(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// A strategic merge of a list whose patch strategy is `merge` on the key
/// `type` (`patchMergeKey:"type"` on NodeStatus and PodStatus conditions):
/// an item of the patch merges into the item of the same `type`, or is
/// appended; `$patch: delete` removes it
/// (staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go,
/// `mergeSlice` and the `$patch` directive).
pub fn merge_by_type(mut list: Vec<Value>, patch: &Value) -> Vec<Value> {
    for item in patch.as_array().into_iter().flatten() {
        let kind = &item["type"];
        let pos = list.iter().position(|c| &c["type"] == kind);
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                list.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => merge_json(&mut list[i], item),
            None => list.push(item.clone()),
        }
    }
    list
}

/// Strategic merge of a status patch: `conditions` merge by `type`
/// ([`merge_by_type`]); other fields merge as maps.
pub fn merge_status(object: &mut Value, patch: &Value) {
    let Some(status_patch) = patch.get("status").and_then(Value::as_object) else {
        return;
    };
    for (key, value) in status_patch {
        if key == "conditions" {
            let list = object["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            object["status"]["conditions"] = json!(merge_by_type(list, value));
        } else {
            merge_json(&mut object["status"][key], value);
        }
    }
}

/// RFC 6902 JSON patch: a body that is not one is 400; a failed `test`, or
/// a path that is not there, is 422 (patch.go, `applyJSPatch`).
pub fn json_patch(target: &mut Value, body: &Value) -> Result<(), crate::status::Answer> {
    let patch: json_patch::Patch = serde_json::from_value(body.clone()).map_err(|e| {
        crate::status::status(400, "BadRequest", &format!("invalid JSON patch: {e}"))
    })?;
    json_patch::patch(target, &patch).map_err(|e| crate::status::status(422, "", &e.to_string()))
}
