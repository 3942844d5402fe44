output "topics" {
  description = "Topic names: publish requests to 'requests', subscribe to 'notifications'. 'upload_notifications' and 'checkpoint_events' carry the buckets' notifications (checkpoint_events is null when no bucket notifies)."
  value = {
    requests             = google_pubsub_topic.requests.name
    events               = google_pubsub_topic.events.name
    notifications        = google_pubsub_topic.notifications.name
    ticks                = google_pubsub_topic.ticks.name
    upload_notifications = google_pubsub_topic.upload_notifications.name
    checkpoint_events    = one(google_pubsub_topic.checkpoint_events[*].name)
  }
}

output "function_uris" {
  description = "run.app URL of each function, by entry point (internal ingress: reachable from Pub/Sub and Eventarc only)."
  value       = local.function_uris
}

output "status_page_url" {
  description = "URL of the status page (authenticated callers only: open it through `gcloud run services proxy <status_page_service>`)."
  value       = google_cloudfunctions2_function.status_page.service_config[0].uri
}

output "status_page_service" {
  description = "Cloud Run service of the status page, for `gcloud run services proxy`."
  value       = google_cloudfunctions2_function.status_page.service_config[0].service
}

output "service_accounts" {
  description = "Service account emails: one per function, the push invoker, the upload trigger (eventarc mode) and the build identity."
  value = merge(
    { for name, sa in google_service_account.function : name => sa.email },
    {
      push_invoker   = google_service_account.push_invoker.email
      upload_trigger = one(google_service_account.upload_trigger[*].email)
      build          = google_service_account.build.email
      status_page    = google_service_account.status_page.email
    },
  )
}

output "upload_bucket" {
  description = "The request bucket: upload request files to gs://<this>/<upload_prefix>. Request files only; never write checkpoints here."
  value       = google_storage_bucket.uploads.name
}

output "request_bucket" {
  description = "The same bucket as upload_bucket, by the name the code gives it (FLEXJOBS_REQUEST_BUCKET)."
  value       = google_storage_bucket.uploads.name
}

output "checkpoint_notification_buckets" {
  description = "The checkpoint buckets whose new objects reach handle_upload as live progress."
  value       = sort(tolist(local.checkpoint_notify_buckets))
}

output "source_bucket" {
  description = "Bucket of the function source zips."
  value       = google_storage_bucket.source.name
}

output "dead_letter_topics" {
  description = "Dead-letter topic of each push path, by entry point (checkpoint_events: the checkpoint buckets' path to handle_upload)."
  value       = { for name, topic in google_pubsub_topic.dead_letter : name => topic.name }
}

output "dead_letter_inspect_subscriptions" {
  description = "Pull subscription on each dead-letter topic, by push path: gcloud pubsub subscriptions pull <name> --auto-ack"
  value       = { for name, sub in google_pubsub_subscription.dead_letter_inspect : name => sub.name }
}

output "hint_log_filter" {
  description = "Filter of the log sink that feeds the events topic."
  value       = google_logging_project_sink.hints.filter
}
