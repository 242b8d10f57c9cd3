//! Rows of the row-oriented tables (`interfaces`, `alerts`, `nic`: few rows per interval) as
//! typed cells in the table's column order, and the Arrow batch of such rows.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;

/// A cell of the row-oriented tables (interfaces, alerts: few rows).
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    S(String),
    OS(Option<String>),
    T(u64),
    I(i64),
    OI(Option<i64>),
    F(Option<f64>),
}

/// Builds a batch from rows of cells (each row in `schema` order).
pub fn rows_batch(
    schema: &SchemaRef,
    rows: &[Vec<Cell>],
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let mut cols: Vec<ArrayRef> = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        let col = |r: &Vec<Cell>| r.get(i).cloned();
        let arr: ArrayRef = match f.data_type() {
            DataType::Utf8 => Arc::new(StringArray::from(
                rows.iter()
                    .map(|r| match col(r) {
                        Some(Cell::S(s)) => Some(s),
                        Some(Cell::OS(s)) => s,
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            )),
            DataType::Timestamp(..) => Arc::new(
                TimestampMicrosecondArray::from(
                    rows.iter()
                        .map(|r| match col(r) {
                            Some(Cell::T(ns)) => Some((ns / 1000) as i64),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                )
                .with_timezone("UTC"),
            ),
            DataType::Int64 => Arc::new(Int64Array::from(
                rows.iter()
                    .map(|r| match col(r) {
                        Some(Cell::I(v)) => Some(v),
                        Some(Cell::OI(v)) => v,
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            )),
            _ => Arc::new(Float64Array::from(
                rows.iter()
                    .map(|r| match col(r) {
                        Some(Cell::F(v)) => v,
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            )),
        };
        cols.push(arr);
    }
    RecordBatch::try_new(Arc::clone(schema), cols)
}
