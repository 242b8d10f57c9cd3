//! roce-analyze: reads the Parquet flow logs roce-observe writes (`flows/`, `interfaces/`,
//! `alerts/` under an output directory, Hive-partitioned) and answers the bring-up questions:
//! is the marking right, is every CE answered by CNPs, does PFC pause only the RDMA priority,
//! does any QP go back N; and compares a run against a recorded golden baseline. The queries run
//! on Apache DataFusion (feature `engine`, on by default; without it only the file checks of
//! [`load`] and [`path`] are built, as the fuzz targets use them).

#[cfg(feature = "engine")]
pub mod engine;
#[cfg(feature = "engine")]
pub mod hosts;
#[cfg(feature = "engine")]
pub mod html;
pub mod load;
#[cfg(feature = "engine")]
pub mod path;
#[cfg(feature = "engine")]
pub mod report;
#[cfg(feature = "engine")]
pub mod sql_views;
#[cfg(feature = "engine")]
pub mod time;
