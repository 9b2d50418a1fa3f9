output "layer_arns" {
  description = "pgmux layer version ARN per architecture."
  value       = { for arch, layer in aws_lambda_layer_version.pgmux : arch => layer.arn }
}

output "classic_function_name" {
  value = aws_lambda_function.classic.function_name
}
