# Versions and backend. Terraform >= 1.6; the google provider is pinned to its 7.x series
# (every resource and argument here exists in 7.45). Cloud Build runs Terraform 1.9.8 (see
# ../cloudbuild.yaml).
terraform {
  required_version = ">= 1.6"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 7.45"
    }
    # time_sleep: new IAM grants take up to a minute to apply; the functions' first build
    # waits for them (the provider's own Cloud Functions examples do the same).
    time = {
      source  = "hashicorp/time"
      version = "~> 0.13"
    }
  }

  # State in a GCS bucket you create once (see docs/deploy.md, "Prerequisites"):
  #   terraform init -backend-config=bucket=BUCKET -backend-config=prefix=flexjobs
  backend "gcs" {}
}

provider "google" {
  project = var.project_id
  region  = var.region

  default_labels = merge({ app = "flexjobs" }, var.labels)
}
