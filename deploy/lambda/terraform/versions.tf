terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 6.25.0 added aws_lambda_capacity_provider and capacity_provider_config on aws_lambda_function
      # (Lambda Managed Instances).
      version = ">= 6.25.0"
    }
  }
}
