# Buckets: the function source, and the upload bucket whose new objects handle_upload takes.

resource "google_storage_bucket" "source" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (turn on Data Access logs for Cloud Storage to see reads); usage-log delivery would need a second bucket, itself unlogged, for objects only Terraform and Cloud Functions touch.
  name                        = local.source_bucket_name
  location                    = var.region
  force_destroy               = true # only build inputs, all reproducible with ./dev package
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = true
  }

  # A new source zip has a new name; Terraform deletes the old object, which versioning keeps
  # as a noncurrent version for 30 days (time to roll back), then this rule removes it.
  lifecycle_rule {
    condition {
      with_state                 = "ARCHIVED"
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# Request files under upload_prefix, and any checkpoint markers written here. In the function
# region: an Eventarc storage trigger must be in its bucket's location.
resource "google_storage_bucket" "uploads" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (turn on Data Access logs for Cloud Storage to see reads); usage-log delivery would need a second bucket, itself unlogged.
  #checkov:skip=CKV_GCP_78:Versioning stays off on purpose: flexjobs reads each request file once, at the generation its event names, and never an older one; keeping every overwritten file would only cost storage. Request ids derive from the generation, so a re-upload is a new request either way.
  name                        = local.upload_bucket_name
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = false
  }

  # Request files are read once; only objects under the request prefix expire. Nothing else
  # in the bucket (checkpoints) is ever deleted by this rule.
  dynamic "lifecycle_rule" {
    for_each = var.upload_retention_days > 0 && local.upload_prefix != "" ? [1] : []
    content {
      condition {
        age            = var.upload_retention_days
        matches_prefix = [local.upload_prefix]
      }
      action {
        type = "Delete"
      }
    }
  }

  depends_on = [google_project_service.apis]
}

# --- Uploads through bucket notifications (upload_delivery = "notification") ------------------
# The bucket publishes OBJECT_FINALIZE (payloadFormat JSON_API_V1) to upload_notifications_topic;
# pubsub.tf pushes that topic to handle_upload with a dead-letter topic, like every push path.

resource "google_pubsub_topic_iam_member" "storage_agent_notifications" {
  count = var.upload_delivery == "notification" ? 1 : 0

  topic  = google_pubsub_topic.upload_notifications[0].id
  role   = "roles/pubsub.publisher"
  member = local.storage_service_agent
}

resource "google_storage_notification" "uploads" {
  count = var.upload_delivery == "notification" ? 1 : 0

  bucket         = google_storage_bucket.uploads.name
  payload_format = "JSON_API_V1"
  topic          = google_pubsub_topic.upload_notifications[0].id
  event_types    = ["OBJECT_FINALIZE"]

  depends_on = [google_pubsub_topic_iam_member.storage_agent_notifications]
}
