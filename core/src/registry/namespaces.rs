//! The namespaces aggregate: creating, updating and deleting namespaces.

use crate::{Error, Event, NamespaceId};

use super::{NamespaceInfo, Registry, SaveMode, Tx};

impl Registry {
    pub(super) fn save_namespace(
        &mut self,
        tx: &mut Tx,
        id: &NamespaceId,
        name: &str,
        description: &str,
        mode: SaveMode,
    ) -> Result<(), Error> {
        if id.is_public() {
            return Err(match mode {
                SaveMode::Create => Error::NamespaceExists {
                    namespace: id.to_string(),
                },
                SaveMode::Update => {
                    Error::invalid("namespace", "the default namespace cannot be changed")
                }
            });
        }
        check_namespace_text("namespaceName", name, 128)?;
        check_namespace_text("namespaceDesc", description, 256)?;
        let explicit = self.namespaces.get(id).is_some_and(|ns| ns.info.is_some());
        match (mode, explicit) {
            (SaveMode::Create, true) => {
                return Err(Error::NamespaceExists {
                    namespace: id.to_string(),
                })
            }
            (SaveMode::Update, false) => {
                return Err(Error::NamespaceNotFound {
                    namespace: id.to_string(),
                })
            }
            _ => {}
        }
        let info = NamespaceInfo {
            name: name.to_owned(),
            description: description.to_owned(),
        };
        let namespace = self.namespaces.entry(id.clone()).or_default();
        if namespace.info.as_ref() == Some(&info) {
            return Ok(());
        }
        namespace.info = Some(info);
        tx.events.push(Event::NamespaceSaved {
            info: Box::new(crate::event::NamespaceDetails {
                namespace: id.clone(),
                name: name.to_owned(),
                description: description.to_owned(),
            }),
        });
        Ok(())
    }

    pub(super) fn delete_namespace(&mut self, tx: &mut Tx, id: &NamespaceId) -> Result<(), Error> {
        if id.is_public() {
            return Err(Error::invalid(
                "namespaceId",
                "the default namespace cannot be deleted",
            ));
        }
        let Some(namespace) = self.namespaces.get(id).filter(|ns| ns.info.is_some()) else {
            return Err(Error::NamespaceNotFound {
                namespace: id.to_string(),
            });
        };
        let configs = self.config_count(id);
        if !namespace.services.is_empty() || configs > 0 {
            // Deleting it would silently drop registrations or configs.
            return Err(Error::NamespaceNotEmpty {
                namespace: id.to_string(),
                services: namespace.services.len() + configs,
            });
        }
        self.namespaces.remove(id);
        tx.events.push(Event::NamespaceRemoved {
            namespace: id.clone(),
        });
        Ok(())
    }
}

fn check_namespace_text(field: &'static str, value: &str, max: usize) -> Result<(), Error> {
    if value.chars().count() > max {
        return Err(Error::invalid(
            field,
            format!("longer than {max} characters"),
        ));
    }
    if value
        .chars()
        .any(|c| "@#$%^&*".contains(c) || c.is_control())
    {
        return Err(Error::invalid(
            field,
            "must not contain @#$%^&* or control characters",
        ));
    }
    Ok(())
}
