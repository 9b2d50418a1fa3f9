# pgmux's own CloudWatch metrics (namespace pgmux, dimension FunctionName), from the EMF lines it prints on
# stdout; docs/operations.md says what each means.
data "aws_region" "current" {}

resource "aws_cloudwatch_dashboard" "pgmux" {
  dashboard_name = "${var.name}-pgmux"
  dashboard_body = templatefile("${path.module}/dashboard.json.tftpl", {
    region  = data.aws_region.current.region
    classic = aws_lambda_function.classic.function_name
    managed = aws_lambda_function.managed.function_name
  })
}

output "layer_arns" {
  description = "pgmux layer version ARN per architecture."
  value       = { for arch, layer in aws_lambda_layer_version.pgmux : arch => layer.arn }
}

output "classic_function_name" {
  value = aws_lambda_function.classic.function_name
}

output "dashboard_name" {
  value = aws_cloudwatch_dashboard.pgmux.dashboard_name
}
