"""The host's users in the admin, so support accounts can be created and put in the
"Realtime support" group (messenger_realtime's migration 0004) without a shell."""

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import UserChangeForm, UserCreationForm

from .models import User


class MessengerUserCreationForm(UserCreationForm):  # type: ignore[type-arg]
    class Meta(UserCreationForm.Meta):  # type: ignore[name-defined,misc]
        model = User
        fields = ("username", "display_name")


class MessengerUserChangeForm(UserChangeForm):  # type: ignore[type-arg]
    class Meta(UserChangeForm.Meta):  # type: ignore[name-defined,misc]
        model = User


@admin.register(User)
class UserAdmin(DjangoUserAdmin):  # type: ignore[type-arg]
    form = MessengerUserChangeForm
    add_form = MessengerUserCreationForm
    list_display = ("username", "display_name", "is_staff", "is_active", "last_login")
    search_fields = ("username", "display_name", "email")
    fieldsets = (
        *DjangoUserAdmin.fieldsets,  # type: ignore[misc]
        ("Messenger", {"fields": ("display_name",)}),
    )
    add_fieldsets = (
        (
            None,
            {
                "classes": ("wide",),
                "fields": ("username", "display_name", "password1", "password2"),
            },
        ),
    )
