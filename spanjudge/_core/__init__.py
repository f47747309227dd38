"""spanjudge/_core"""
