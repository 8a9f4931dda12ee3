//! Reading TOML files with errors that name the file, the line and the field, as the scenario
//! files do: for a crate that declares workloads in files of its own (`crashpoint-declared`
//! reads `*.workload.toml`).

pub use crate::scenario::file::{line_of, line_of_field, toml_error, utf8};
pub use crate::scenario::{is_workload_file, WORKLOAD_FILE_SUFFIX};
