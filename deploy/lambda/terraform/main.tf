# pgmux as a Lambda extension layer (x86_64 and arm64), attached to the sample function on classic Lambda
# here and on Lambda Managed Instances in managed-instances.tf. Build the zips first, at the repository
# root: `make layer lambda-sample`. See deploy/lambda/README.md.

locals {
  repo_root = "${path.module}/../../.."

  layer_zip = {
    x86_64 = coalesce(var.layer_zip_x86_64, "${local.repo_root}/dist/pgmux-layer-x86_64.zip")
    arm64  = coalesce(var.layer_zip_arm64, "${local.repo_root}/dist/pgmux-layer-arm64.zip")
  }
  function_zip = coalesce(var.function_zip, "${local.repo_root}/dist/pgmux-sample-function.zip")

  # What pgmux reads in Lambda mode (it listens on 127.0.0.1:5432 and trusts loopback clients there), and
  # what the sample function reads. Unset settings are left out rather than set empty.
  environment = { for k, v in {
    PGMUX_DATABASE_URL  = var.database_url
    PGMUX_SECRET_ARN    = var.secret_arn
    PGMUX_DATABASE_HOST = var.database_host
    PGMUX_DATABASE_PORT = var.database_port == null ? null : tostring(var.database_port)
    PGMUX_IAM_AUTH      = tostring(var.iam_auth)
    PGMUX_SSLMODE       = "verify-full"
    PGMUX_LOG_LEVEL     = var.log_level
    PGUSER              = var.db_user
    PGDATABASE          = var.db_name
    SLEEP_MS            = tostring(var.sleep_ms)
  } : k => v if v != null }
}

data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}

# The extension, once per architecture. Each zip holds exactly extensions/pgmux (mode 0755), which Lambda
# unpacks to /opt/extensions/pgmux and starts before the function's runtime.
resource "aws_lambda_layer_version" "pgmux" {
  for_each = local.layer_zip

  layer_name               = "${var.name}-${each.key}"
  description              = "pgmux PostgreSQL pooler, Lambda extension (${each.key})"
  filename                 = each.value
  source_code_hash         = filebase64sha256(each.value)
  compatible_architectures = [each.key]
  license_info             = "Apache-2.0"
}

# The functions' role. pgmux runs inside the function's execution environment with these credentials:
# it reads the secret and signs IAM database tokens with them.
data "aws_iam_policy_document" "lambda_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "function" {
  name               = "${var.name}-function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

resource "aws_iam_role_policy_attachment" "function" {
  for_each = toset([
    "service-role/AWSLambdaBasicExecutionRole",
    "service-role/AWSLambdaVPCAccessExecutionRole", # network interfaces of the classic function in the VPC
  ])
  role       = aws_iam_role.function.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/${each.value}"
}

data "aws_iam_policy_document" "database_login" {
  dynamic "statement" {
    for_each = var.secret_arn == null ? [] : [var.secret_arn]
    content {
      sid       = "ReadDatabaseSecret"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [statement.value]
    }
  }
  dynamic "statement" {
    for_each = var.iam_auth ? [var.db_user] : []
    content {
      sid     = "IamDatabaseLogin"
      actions = ["rds-db:connect"]
      # Any region: a DbiResourceId / cluster resource id is unique in the account anyway.
      resources = [join(":", [
        "arn", data.aws_partition.current.partition, "rds-db", "*",
        data.aws_caller_identity.current.account_id, "dbuser", "${var.db_resource_id}/${statement.value}",
      ])]
    }
  }
}

resource "aws_iam_role_policy" "database_login" {
  count  = var.secret_arn != null || var.iam_auth ? 1 : 0
  name   = "pgmux-database-login"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.database_login.json
}

# (a) Classic Lambda: one invocation per execution environment, in the VPC. pgmux keeps a pool of 1-2
# connections per environment and reuses them across warm invocations.
resource "aws_lambda_function" "classic" {
  function_name    = "${var.name}-sample-classic"
  description      = "pgmux sample function on classic Lambda"
  role             = aws_iam_role.function.arn
  runtime          = "nodejs22.x"
  handler          = "index.handler"
  filename         = local.function_zip
  source_code_hash = filebase64sha256(local.function_zip)
  architectures    = [var.architecture]
  layers           = [aws_lambda_layer_version.pgmux[var.architecture].arn]
  memory_size      = 512
  timeout          = 30

  vpc_config {
    subnet_ids         = var.subnet_ids
    security_group_ids = var.security_group_ids
  }

  environment {
    variables = merge(local.environment, { PGMUX_POOL_MAX = tostring(var.classic_pool_max) })
  }

  lifecycle {
    precondition {
      condition     = var.database_url != null || var.secret_arn != null
      error_message = "Set database_url or secret_arn."
    }
  }

  depends_on = [aws_iam_role_policy_attachment.function, aws_iam_role_policy.database_login]
}
