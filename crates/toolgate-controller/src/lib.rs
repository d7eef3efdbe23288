//! toolgate's Kubernetes controller: `PolicyProfile` and `Approval` custom
//! resources reconciled into signed policy bundles.
//!
//! Entry points for the `toolgate` CLI:
//! - [`run_controller`] with the [`ControllerConfig`] built from
//!   [`ControllerArgs`] (`toolgate controller …`);
//! - [`crdgen`] / [`write_crds`] (`toolgate crdgen`).
//!
//! The reconcile logic is split so that bundle planning, status and fleet
//! computation are plain functions ([`profile`], [`approval`], [`fleet`]);
//! the Kubernetes client only appears in the async reconcile functions,
//! which take a [`Context`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod approval;
pub mod archive;
pub mod cancellation;
pub mod checkpoint;
mod config;
pub mod context;
pub mod crd;
mod error;
pub mod fleet;
pub mod keys;
pub mod leader;
pub mod metrics;
pub mod notify;
pub mod plugin;
pub mod profile;
mod run;
pub mod status;
pub mod stdout;
pub mod tenancy;
mod trace;

pub use config::{ControllerArgs, ControllerConfig};
pub use context::{Context, Settings};
pub use crd::{crdgen, write_crds};
pub use error::ControllerError;
pub use run::{run_controller, run_reconcilers};

/// Field manager and Event reporter name of the controller.
pub const MANAGER: &str = "toolgate-controller";
