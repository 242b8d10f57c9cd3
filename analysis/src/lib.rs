//! roce-analyze: reads the Parquet flow logs roce-observe writes (`flows/`, `interfaces/`,
//! `alerts/` under an output directory, Hive-partitioned) and answers the bring-up questions:
//! is the marking right, is every CE answered by CNPs, does PFC pause only the RDMA priority,
//! does any QP go back N; and compares a run against a recorded golden baseline.

pub mod load;
pub mod path;
pub mod report;
