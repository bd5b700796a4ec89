//! Native listings: namespaces, groups, services and one service, read
//! from this node's registry. Every namespace's name is listed to any
//! caller (as Nacos lists them); what is in one needs its read
//! permission.

use understudy_core::{GroupName, NamespaceId, ServiceKey};
use understudy_proto::native::{
    self, GetServiceRequest, GetServiceResponse, ListNamespacesRequest, ListNamespacesResponse,
    ListServicesRequest, ListServicesResponse,
};

use super::{status, NativeApi};
use crate::auth::Identity;
use understudy_core::access::{naming_resource, service_resource, Action};

impl NativeApi {
    pub(super) async fn namespaces(
        &self,
        _: tonic::Request<ListNamespacesRequest>,
    ) -> Result<tonic::Response<ListNamespacesResponse>, tonic::Status> {
        let namespaces = self
            .node
            .registry()
            .namespaces()
            .into_iter()
            .map(|n| native::NamespaceInfo {
                id: n.id.to_string(),
                name: n.info.name,
                description: n.info.description,
                services: n.services as u64,
            })
            .collect();
        Ok(tonic::Response::new(ListNamespacesResponse { namespaces }))
    }

    pub(super) async fn groups(
        &self,
        request: tonic::Request<native::ListGroupsRequest>,
        identity: Option<&Identity>,
    ) -> Result<tonic::Response<native::ListGroupsResponse>, tonic::Status> {
        let namespace = NamespaceId::parse(&request.into_inner().namespace).map_err(status)?;
        self.permit(
            identity,
            naming_resource(namespace.as_str(), "", ""),
            Action::Read,
        )?;
        let mut groups: Vec<String> = self
            .node
            .registry()
            .services(&namespace, None)
            .map(|s| s.key().group.to_string())
            .collect();
        groups.dedup();
        Ok(tonic::Response::new(native::ListGroupsResponse { groups }))
    }

    pub(super) async fn services(
        &self,
        request: tonic::Request<ListServicesRequest>,
        identity: Option<&Identity>,
    ) -> Result<tonic::Response<ListServicesResponse>, tonic::Status> {
        let request = request.into_inner();
        let namespace = NamespaceId::parse(&request.namespace).map_err(status)?;
        let group = match request.group.trim() {
            "" => None,
            raw => Some(GroupName::parse(raw).map_err(status)?),
        };
        self.permit(
            identity,
            naming_resource(
                namespace.as_str(),
                group.as_ref().map_or("", GroupName::as_str),
                "",
            ),
            Action::Read,
        )?;
        let registry = self.node.registry();
        let services = registry
            .services(&namespace, group.as_ref())
            .map(|s| native::ServiceRef::from(s.key()))
            .collect();
        Ok(tonic::Response::new(ListServicesResponse {
            services,
            revision: registry.revision(),
        }))
    }

    pub(super) async fn service(
        &self,
        request: tonic::Request<GetServiceRequest>,
        identity: Option<&Identity>,
    ) -> Result<tonic::Response<GetServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let service = request
            .service
            .ok_or_else(|| tonic::Status::invalid_argument("invalid service: is required"))?;
        let key = ServiceKey::try_from(&service)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        self.permit(identity, service_resource(&key), Action::Read)?;
        let registry = self.node.registry();
        let revision = registry.revision();
        let response = match registry.service(&key) {
            None => GetServiceResponse {
                exists: false,
                revision,
                ..GetServiceResponse::default()
            },
            Some(service) => GetServiceResponse {
                exists: true,
                instances: service
                    .instances()
                    .map(|i| native::Instance::of(&key, i))
                    .collect(),
                zones: service
                    .zones()
                    .into_iter()
                    .map(|(zone, instances)| native::Zone {
                        name: zone.to_owned(),
                        instances: instances
                            .into_iter()
                            .map(|i| native::Instance::of(&key, i))
                            .collect(),
                    })
                    .collect(),
                revision,
            },
        };
        Ok(tonic::Response::new(response))
    }
}
