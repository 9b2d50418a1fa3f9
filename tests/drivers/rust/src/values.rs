//! The ten values of S3, one per type the scenario names, and their comparison.

use chrono::{DateTime, TimeZone, Utc};
use rust_decimal::Decimal;

use crate::report::Failure;

/// One value per type: int4, int8, numeric, text, bytea, bool, timestamptz, uuid, jsonb, int4[].
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub int4: i32,
    pub int8: i64,
    pub numeric: Decimal,
    pub text: String,
    pub bytea: Vec<u8>,
    pub boolean: bool,
    pub timestamptz: DateTime<Utc>,
    pub uuid: uuid::Uuid,
    pub jsonb: serde_json::Value,
    pub int_array: Vec<i32>,
}

impl Sample {
    pub const SQL: &'static str = "SELECT $1::int4, $2::int8, $3::numeric, $4::text, $5::bytea, $6::bool, \
                                   $7::timestamptz, $8::uuid, $9::jsonb, $10::int4[]";
    pub const TYPES: &'static str = "int4 int8 numeric text bytea bool timestamptz uuid jsonb int4[]";

    pub fn new() -> Sample {
        let timestamptz = Utc
            .with_ymd_and_hms(2026, 11, 21, 13, 45, 6)
            .single()
            .map(|t| t + chrono::Duration::microseconds(123_456))
            .unwrap_or_default();
        Sample {
            int4: -2_000_000_001,
            int8: 9_000_000_000_000_000_001,
            numeric: Decimal::new(-12_345_678_901_234, 6),
            text: "pgmux ünïcödé ✓ 'quoted' \"double\"".to_owned(),
            bytea: (0..=255).collect(),
            boolean: true,
            timestamptz,
            uuid: uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
            jsonb: serde_json::json!({"k": [1, 2.5, null, "x"], "nested": {"b": true}}),
            int_array: vec![1, -2, 3, i32::MAX],
        }
    }

    /// Fails naming every field of `back` that differs from `self`.
    pub fn compare(&self, back: &Sample) -> Result<(), Failure> {
        let mut differ = Vec::new();
        let mut check = |name: &str, same: bool| {
            if !same {
                differ.push(name.to_owned());
            }
        };
        check("int4", self.int4 == back.int4);
        check("int8", self.int8 == back.int8);
        check("numeric", self.numeric == back.numeric);
        check("text", self.text == back.text);
        check("bytea", self.bytea == back.bytea);
        check("bool", self.boolean == back.boolean);
        check("timestamptz", self.timestamptz == back.timestamptz);
        check("uuid", self.uuid == back.uuid);
        check("jsonb", self.jsonb == back.jsonb);
        check("int4[]", self.int_array == back.int_array);
        if differ.is_empty() {
            Ok(())
        } else {
            Err(Failure::check(format!("values differ after the round trip: {}", differ.join(", "))))
        }
    }
}
