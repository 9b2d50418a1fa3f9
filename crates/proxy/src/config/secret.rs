//! Passwords and tokens in the configuration. The type lives in `pgmux-secret`, shared with the AWS glue
//! (Secrets Manager passwords, IAM tokens), so a secret read from AWS and one read from the file are one
//! type that prints as `***`.

pub use pgmux_secret::Secret;
