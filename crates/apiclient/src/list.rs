//! Paged lists, as client-go's pagers read them.

use kube::api::{Api, ListParams};

/// Every page of a list: client-go's pagers ask 500 at a time, so one
/// response never holds a big cluster's objects at once.
pub async fn list_all<K>(api: &Api<K>, params: ListParams) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(500);
    let mut items = Vec::new();
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}
