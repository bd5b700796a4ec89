//! Nacos 3 JSON bodies of the v3 HTTP API (`/nacos/v3/client/**`,
//! `/nacos/v3/admin/**`) that differ from the 2.x ones in [`crate::nacos`]:
//! the page object and the admin views. The envelope is the 2.x
//! `Result` ([`crate::nacos::NacosResult`]), unchanged in Nacos 3.

use serde::{Deserialize, Serialize};

/// Nacos' `Page`: `{totalCount, pageNumber, pagesAvailable, pageItems}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    pub total_count: usize,
    pub page_number: u64,
    pub pages_available: u64,
    pub page_items: Vec<T>,
}

impl<T> Page<T> {
    /// Page `page_no` (from 1) of `page_size` items out of `all`.
    pub fn slice(all: impl IntoIterator<Item = T>, page_no: u64, page_size: u64) -> Self {
        let mut total = 0;
        let start = page_no.saturating_sub(1).saturating_mul(page_size);
        let mut page_items = Vec::new();
        for (i, item) in all.into_iter().enumerate() {
            total += 1;
            let i = i as u64;
            if i >= start && i < start.saturating_add(page_size) {
                page_items.push(item);
            }
        }
        Self::of(total, page_no, page_size, page_items)
    }

    /// Same, counted as Nacos' naming pages are: `pagesAvailable` is
    /// `total / size + 1` for any items at all (a full last page counts
    /// one more), 0 for none.
    pub fn naming(all: impl IntoIterator<Item = T>, page_no: u64, page_size: u64) -> Self {
        let mut page = Self::slice(all, page_no, page_size);
        page.pages_available = match (page.total_count, page_size) {
            (0, _) | (_, 0) => 0,
            (total, size) => total as u64 / size + 1,
        };
        page
    }

    /// A page whose items were already cut out of `total`.
    pub fn of(total: usize, page_no: u64, page_size: u64, page_items: Vec<T>) -> Self {
        let pages_available = if page_size == 0 {
            0
        } else {
            (total as u64).div_ceil(page_size)
        };
        Self {
            total_count: total,
            page_number: page_no,
            pages_available,
            page_items,
        }
    }
}

/// A namespace as Nacos 3 lists it: the default namespace is `public`
/// (Nacos 2.x wrote `""`), and `configCount` counts its configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceV3 {
    pub namespace: String,
    pub namespace_show_name: String,
    pub namespace_desc: String,
    pub quota: u32,
    pub config_count: usize,
    /// 0 global (the default namespace), 1 custom.
    #[serde(rename = "type")]
    pub kind: u8,
}

impl NamespaceV3 {
    /// Renders a namespace holding `config_count` configs.
    pub fn new(summary: &understudy_core::NamespaceSummary, config_count: usize) -> Self {
        let default = summary.id.is_public();
        Self {
            namespace: summary.id.to_string(),
            namespace_show_name: summary.info.name.clone(),
            namespace_desc: summary.info.description.clone(),
            quota: 200,
            config_count,
            kind: u8::from(!default),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_counts_all_items_and_holds_its_own() {
        let page = Page::slice(1..=7, 2, 3);
        assert_eq!(page.total_count, 7);
        assert_eq!(page.pages_available, 3);
        assert_eq!(page.page_items, vec![4, 5, 6]);
        let beyond = Page::slice(1..=7, 4, 3);
        assert!(beyond.page_items.is_empty());
        assert_eq!(beyond.total_count, 7);
        let json = serde_json::to_value(Page::slice(["a"], 1, 10)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"totalCount":1,"pageNumber":1,"pagesAvailable":1,"pageItems":["a"]})
        );
    }
}

/// A service's detail in Nacos 3's admin API (its `ServiceDetailInfo`):
/// the v2 detail, its namespace named `namespaceId`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDetailV3 {
    pub namespace_id: String,
    pub service_name: String,
    pub group_name: String,
    pub cluster_map: std::collections::BTreeMap<String, crate::nacos::ClusterJson>,
    pub metadata: understudy_core::Metadata,
    pub protect_threshold: f32,
    pub selector: crate::nacos::SelectorJson,
    pub ephemeral: bool,
}

impl From<crate::nacos::ServiceDetailV2> for ServiceDetailV3 {
    fn from(v2: crate::nacos::ServiceDetailV2) -> Self {
        Self {
            namespace_id: v2.namespace,
            service_name: v2.service_name,
            group_name: v2.group_name,
            cluster_map: v2.cluster_map,
            metadata: v2.metadata,
            protect_threshold: v2.protect_threshold,
            selector: v2.selector,
            ephemeral: v2.ephemeral,
        }
    }
}
