//! A provider process for end-to-end tests: registers one instance with
//! the official Rust Nacos client, says `registered` on stdout, and stays
//! until it is killed, so a test can watch what a client's death does.
//!
//! Usage: `nacos_provider SERVER_ADDR SERVICE IP PORT`

use std::io::Write;

use nacos_sdk::api::naming::{NamingServiceBuilder, ServiceInstance};
use nacos_sdk::api::props::ClientProps;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [server, service, ip, port] = args.as_slice() else {
        anyhow::bail!("usage: nacos_provider SERVER_ADDR SERVICE IP PORT");
    };
    let naming = NamingServiceBuilder::new(
        ClientProps::new()
            .server_addr(server.clone())
            .naming_load_cache_at_start(false)
            .env_first(false),
    )
    .build()
    .await?;
    let instance = ServiceInstance {
        ip: ip.clone(),
        port: port.parse()?,
        ..ServiceInstance::default()
    };
    naming
        .register_instance(service.clone(), None, instance)
        .await?;
    println!("registered");
    std::io::stdout().flush()?;
    std::future::pending::<()>().await;
    Ok(())
}
