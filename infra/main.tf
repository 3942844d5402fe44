# flexjobs: the APIs, the project's service agents, and the names every other file shares.
# Files by concern: pubsub.tf, functions.tf, iam.tf, firestore.tf, logging.tf, scheduler.tf,
# storage.tf. README.md describes the whole.

locals {
  # Every API the installation uses. Service Usage and Resource Manager must already be on
  # (they are in every new project): Terraform needs them to enable the rest.
  apis = toset([
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudquotas.googleapis.com",
    "cloudscheduler.googleapis.com",
    "eventarc.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ])

  vertex_location    = coalesce(var.vertex_location, var.region)
  firestore_location = coalesce(var.firestore_location, var.region)
  # The request bucket (the resource is still google_storage_bucket.uploads): request files
  # only, never checkpoints (storage.tf).
  upload_bucket_name = coalesce(var.upload_bucket_name, "${var.project_id}-flexjobs-uploads")
  source_bucket_name = "${var.project_id}-flexjobs-source"
  # Where Cloud Functions (2nd gen, the v2 API) copies a function's source before the build
  # reads it: "gcf-v2-sources-PROJECT_NUMBER-REGION" with Google-managed encryption (Cloud Run
  # functions, "Build process overview"). It exists only after the first deploy.
  gcf_sources_bucket = "gcf-v2-sources-${data.google_project.this.number}-${var.region}"
  # The checkpoint buckets whose new objects are pushed to handle_upload as live progress.
  checkpoint_notify_buckets = toset(var.checkpoint_notification_buckets != null ? var.checkpoint_notification_buckets : var.checkpoint_buckets)
  # The code reads the prefix as a folder ("requests" means "requests/"); so does the bucket's
  # lifecycle rule.
  upload_prefix = var.upload_prefix == "" || endswith(var.upload_prefix, "/") ? var.upload_prefix : "${var.upload_prefix}/"

  # Google-managed identities of this project.
  pubsub_service_agent  = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  storage_service_agent = data.google_storage_project_service_account.this.member
}

resource "google_project_service" "apis" {
  for_each = local.apis

  service = each.value
  # Destroying flexjobs leaves the APIs on: other workloads of the project may use them.
  disable_on_destroy = false
}

data "google_project" "this" {
  project_id = var.project_id
}

# Reading it also creates the Cloud Storage service agent if the project has none yet.
data "google_storage_project_service_account" "this" {
  project = var.project_id

  depends_on = [google_project_service.apis]
}
