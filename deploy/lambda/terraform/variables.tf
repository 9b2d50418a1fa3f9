variable "name" {
  description = "Prefix for every resource name."
  type        = string
  default     = "pgmux"
}

variable "architecture" {
  description = "Architecture of both functions and of the managed instances: x86_64 or arm64. Picks the matching layer."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64."
  }
}

variable "layer_zip_x86_64" {
  description = "Layer zip for x86_64 (make layer). Default: dist/pgmux-layer-x86_64.zip at the repository root."
  type        = string
  default     = null
}

variable "layer_zip_arm64" {
  description = "Layer zip for arm64 (make layer). Default: dist/pgmux-layer-arm64.zip at the repository root."
  type        = string
  default     = null
}

variable "function_zip" {
  description = "Sample function zip (make lambda-sample). Default: dist/pgmux-sample-function.zip at the repository root."
  type        = string
  default     = null
}

variable "subnet_ids" {
  description = "Private subnets that reach the database (and Secrets Manager, if secret_arn is set)."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups allowed to connect to the database port."
  type        = list(string)
}

variable "database_url" {
  description = "postgres://user:password@host:5432/dbname, or null when secret_arn is set. It ends up in the functions' environment: prefer secret_arn, or iam_auth with a URL that has no password."
  type        = string
  default     = null
  sensitive   = true
}

variable "secret_arn" {
  description = "Secrets Manager secret in the RDS format (host, port, username, password, dbname)."
  type        = string
  default     = null
}

variable "database_host" {
  description = "Overrides the host of database_url or of the secret."
  type        = string
  default     = null
}

variable "database_port" {
  description = "Overrides the port of database_url or of the secret."
  type        = number
  default     = null
}

variable "iam_auth" {
  description = "Log in to the database with RDS IAM auth tokens instead of a password."
  type        = bool
  default     = false
}

variable "db_resource_id" {
  description = "With iam_auth: the DbiResourceId of the instance or the cluster resource id, for rds-db:connect."
  type        = string
  default     = "*"
}

variable "db_user" {
  description = "Database user the functions log in as (PGUSER): the user of the URL, secret or IAM login."
  type        = string
}

variable "db_name" {
  description = "Database the functions connect to (PGDATABASE)."
  type        = string
  default     = "postgres"
}

variable "classic_pool_max" {
  description = "pgmux pool size per classic execution environment (one invocation at a time: 1-2 is enough)."
  type        = number
  default     = 2
}

variable "managed_pool_max" {
  description = "Database connections per managed execution environment, shared by its concurrent invocations; one is the control connection that sizes the pool from max_connections."
  type        = number
  default     = 5

  validation {
    condition     = var.managed_pool_max >= 2
    error_message = "managed_pool_max counts the control connection too: it must be at least 2."
  }
}

variable "per_execution_environment_max_concurrency" {
  description = "Concurrent invocations per managed execution environment (Node.js default: 64 per vCPU)."
  type        = number
  default     = 64
}

variable "max_vcpu_count" {
  description = "Most vCPUs the capacity provider may run."
  type        = number
  default     = 16
}

variable "sleep_ms" {
  description = "The sample function's pause between its two queries."
  type        = number
  default     = 5000
}

variable "log_level" {
  description = "pgmux log level: error, warn, info, debug or trace."
  type        = string
  default     = "info"
}
