//! The `forge-sim` binary: serves the simulated GitLab and GitHub until interrupted.

use std::net::IpAddr;

use clap::Parser;
use forge_sim::{DEFAULT_TOKEN, DEFAULT_USERNAME, ForgeSim, SimConfig};

/// A stateful simulated GitLab and GitHub over HTTP.
#[derive(Debug, Parser)]
#[command(name = "forge-sim", version)]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "FORGE_SIM_PORT", default_value_t = 0)]
    port: u16,
    /// Address to bind.
    #[arg(long, env = "FORGE_SIM_HOST", default_value = "127.0.0.1")]
    host: IpAddr,
    /// API token of the default user.
    #[arg(long, env = "FORGE_SIM_TOKEN", default_value = DEFAULT_TOKEN)]
    token: String,
    /// Username of the default user.
    #[arg(long, default_value = DEFAULT_USERNAME)]
    username: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let sim = ForgeSim::start(SimConfig {
        host: args.host,
        port: args.port,
        users: vec![(args.username.clone(), args.token.clone())],
        ..SimConfig::default()
    })
    .await?;
    println!("forge-sim listening on {}", sim.base_url());
    println!("  GitLab:  {}", sim.gitlab_url());
    println!("  GitHub:  {}", sim.github_url());
    println!("  control: {}", sim.control_url());
    println!("  token:   {} (user {})", args.token, args.username);
    tokio::signal::ctrl_c().await?;
    println!("forge-sim shutting down");
    Ok(())
}
