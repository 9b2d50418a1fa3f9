# (b) Lambda Managed Instances: a capacity provider runs execution environments on EC2 instances in the
# VPC; each environment runs up to per_execution_environment_max_concurrency invocations at once, and pgmux
# multiplexes them onto managed_pool_max database connections.

# The role Lambda assumes to launch and manage the instances.
resource "aws_iam_role" "capacity_provider_operator" {
  name               = "${var.name}-capacity-provider-operator"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

resource "aws_iam_role_policy_attachment" "capacity_provider_operator" {
  role       = aws_iam_role.capacity_provider_operator.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AWSLambdaManagedEC2ResourceOperator"
}

resource "aws_lambda_capacity_provider" "pgmux" {
  name = "${var.name}-capacity-provider"

  vpc_config {
    subnet_ids         = var.subnet_ids
    security_group_ids = var.security_group_ids
  }

  permissions_config {
    capacity_provider_operator_role_arn = aws_iam_role.capacity_provider_operator.arn
  }

  instance_requirements {
    architectures = [var.architecture]
  }

  capacity_provider_scaling_config {
    scaling_mode   = "Auto"
    max_vcpu_count = var.max_vcpu_count
  }

  depends_on = [aws_iam_role_policy_attachment.capacity_provider_operator]
}

resource "aws_lambda_function" "managed" {
  function_name    = "${var.name}-sample-managed"
  description      = "pgmux sample function on Lambda Managed Instances"
  role             = aws_iam_role.function.arn
  runtime          = "nodejs22.x"
  handler          = "index.handler"
  filename         = local.function_zip
  source_code_hash = filebase64sha256(local.function_zip)
  architectures    = [var.architecture]
  layers           = [aws_lambda_layer_version.pgmux[var.architecture].arn]
  # Managed instances give each execution environment at least 2 GB, and run published versions only.
  memory_size = 2048
  timeout     = 30
  publish     = true
  publish_to  = "LATEST_PUBLISHED"

  capacity_provider_config {
    lambda_managed_instances_capacity_provider_config {
      capacity_provider_arn                     = aws_lambda_capacity_provider.pgmux.arn
      per_execution_environment_max_concurrency = var.per_execution_environment_max_concurrency
      execution_environment_memory_gib_per_vcpu = 2
    }
  }

  environment {
    variables = merge(local.environment, { PGMUX_POOL_MAX = tostring(var.managed_pool_max) })
  }

  lifecycle {
    precondition {
      condition     = var.database_url != null || var.secret_arn != null
      error_message = "Set database_url or secret_arn."
    }
  }

  depends_on = [aws_iam_role_policy_attachment.function, aws_iam_role_policy.database_login]
}

output "managed_function_name" {
  description = "Invoke a published version: aws lambda invoke --function-name NAME:VERSION out.json"
  value       = aws_lambda_function.managed.function_name
}

output "managed_function_version" {
  value = aws_lambda_function.managed.version
}

output "capacity_provider_arn" {
  value = aws_lambda_capacity_provider.pgmux.arn
}
